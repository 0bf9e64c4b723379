// A small Markdown renderer for streamed answers: it builds DOM nodes (never innerHTML from
// model text), so nothing the model writes can run as script. Blocks: paragraphs, headings,
// fenced code (with a copy button), lists, block quotes, tables, $$maths$$; inline: code,
// bold, italic, links (http, https and mailto only), $maths$ as MathML.
import { texToMathML } from "./math.js";

export function renderMarkdown(text) {
  const root = document.createDocumentFragment();
  const lines = text.replace(/\r\n?/g, "\n").split("\n");
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    const fence = line.match(/^\s*(```|~~~)\s*([\w+#.-]*)/);
    if (fence) {
      const body = [];
      i++;
      while (i < lines.length && !lines[i].trim().startsWith(fence[1])) body.push(lines[i++]);
      i++; // the closing fence (or the end of an answer still streaming)
      root.append(codeBlock(body.join("\n"), fence[2]));
      continue;
    }
    if (line.trim().startsWith("$$")) {
      const body = [line.trim().slice(2)];
      let closed = body[0].endsWith("$$");
      if (closed) body[0] = body[0].slice(0, -2);
      i++;
      while (!closed && i < lines.length) {
        const l = lines[i++];
        if (l.trim().endsWith("$$")) { body.push(l.trim().slice(0, -2)); closed = true; } else body.push(l);
      }
      root.append(mathNode(body.join("\n"), true));
      continue;
    }
    if (!line.trim()) { i++; continue; }
    const heading = line.match(/^(#{1,6})\s+(.*)$/);
    if (heading) {
      const h = document.createElement(`h${Math.min(heading[1].length + 1, 6)}`);
      h.append(...inline(heading[2]));
      root.append(h);
      i++;
      continue;
    }
    if (/^\s*>/.test(line)) {
      const quoted = [];
      while (i < lines.length && /^\s*>/.test(lines[i])) quoted.push(lines[i++].replace(/^\s*> ?/, ""));
      const q = document.createElement("blockquote");
      q.append(renderMarkdown(quoted.join("\n")));
      root.append(q);
      continue;
    }
    if (/^\s*([-*+]|\d+[.)])\s+/.test(line)) {
      const ordered = /^\s*\d/.test(line);
      const list = document.createElement(ordered ? "ol" : "ul");
      if (ordered) list.start = parseInt(line.trim(), 10) || 1;
      while (i < lines.length && (/^\s*([-*+]|\d+[.)])\s+/.test(lines[i]) || (/^\s{2,}\S/.test(lines[i]) && list.lastChild))) {
        const item = lines[i].match(/^\s*(?:[-*+]|\d+[.)])\s+(.*)$/);
        if (item) {
          const li = document.createElement("li");
          li.append(...inline(item[1]));
          list.append(li);
        } else {
          list.lastChild.append(" ", ...inline(lines[i].trim()));
        }
        i++;
      }
      root.append(list);
      continue;
    }
    if (line.includes("|") && i + 1 < lines.length && /^\s*\|?\s*:?-{2,}/.test(lines[i + 1])) {
      const rows = [line];
      i += 2;
      while (i < lines.length && lines[i].includes("|") && lines[i].trim()) rows.push(lines[i++]);
      root.append(table(rows));
      continue;
    }
    const para = [];
    while (i < lines.length && lines[i].trim() && !/^\s*(```|~~~|#{1,6}\s|>|\$\$)/.test(lines[i])) {
      if (para.length && /^\s*([-*+]|\d+[.)])\s+/.test(lines[i])) break;
      para.push(lines[i++]);
    }
    const p = document.createElement("p");
    para.forEach((l, k) => {
      if (k) p.append(document.createElement("br"));
      p.append(...inline(l));
    });
    root.append(p);
  }
  return root;
}

function codeBlock(code, language) {
  const pre = document.createElement("pre");
  const el = document.createElement("code");
  if (language) el.dataset.language = language;
  el.textContent = code;
  const copy = document.createElement("button");
  copy.type = "button";
  copy.className = "copy";
  copy.textContent = "Copy";
  copy.setAttribute("aria-label", "Copy the code");
  copy.addEventListener("click", async () => {
    try {
      await navigator.clipboard.writeText(code);
      copy.textContent = "Copied";
    } catch {
      copy.textContent = "Copy failed";
    }
    setTimeout(() => (copy.textContent = "Copy"), 1500);
  });
  pre.append(copy, el);
  return pre;
}

function table(rows) {
  const cells = (row) => row.trim().replace(/^\|/, "").replace(/\|$/, "").split("|").map((c) => c.trim());
  const t = document.createElement("table");
  rows.forEach((row, r) => {
    const tr = document.createElement("tr");
    for (const c of cells(row)) {
      const cell = document.createElement(r ? "td" : "th");
      cell.append(...inline(c));
      tr.append(cell);
    }
    t.append(tr);
  });
  return t;
}

function mathNode(tex, display) {
  const node = texToMathML(tex, display);
  if (node) return node;
  const code = document.createElement("code"); // not TeX we can typeset: shown as written
  code.textContent = display ? `$$${tex}$$` : `$${tex}$`;
  return code;
}

const INLINE = /(`+)([^`]+?)\1|\*\*([^*]+)\*\*|__([^_]+)__|\*([^*\s][^*]*)\*|_([^_\s][^_]*)_|\[([^\]]+)\]\(([^)\s]+)\)|\\\((.+?)\\\)|\$([^$\s](?:[^$]*[^$\s])?)\$/g;

export function inline(text) {
  const out = [];
  let last = 0;
  for (const m of text.matchAll(INLINE)) {
    if (m.index > last) out.push(document.createTextNode(text.slice(last, m.index)));
    last = m.index + m[0].length;
    if (m[2] !== undefined) {
      const c = document.createElement("code");
      c.textContent = m[2];
      out.push(c);
    } else if (m[3] !== undefined || m[4] !== undefined) {
      const b = document.createElement("strong");
      b.append(...inline(m[3] ?? m[4]));
      out.push(b);
    } else if (m[5] !== undefined || m[6] !== undefined) {
      const e = document.createElement("em");
      e.append(...inline(m[5] ?? m[6]));
      out.push(e);
    } else if (m[7] !== undefined) {
      out.push(link(m[7], m[8]));
    } else {
      out.push(mathNode(m[9] ?? m[10], false));
    }
  }
  if (last < text.length) out.push(document.createTextNode(text.slice(last)));
  return out;
}

function link(label, href) {
  let url = null;
  try {
    url = new URL(href, location.href);
  } catch {
    url = null;
  }
  if (!url || !["http:", "https:", "mailto:"].includes(url.protocol)) return document.createTextNode(label);
  const a = document.createElement("a");
  a.href = url.href;
  a.rel = "noopener noreferrer";
  a.target = "_blank";
  a.append(...inline(label));
  return a;
}
