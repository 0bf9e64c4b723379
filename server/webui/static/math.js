// TeX maths as MathML, which the browser typesets itself (no font or script to fetch): the
// subset answers use — fractions, roots, powers and indices, Greek letters, common operators,
// \text, \left/\right. Anything else returns null and the caller shows the TeX as written.
const NS = "http://www.w3.org/1998/Math/MathML";
const GREEK = "alpha beta gamma delta epsilon varepsilon zeta eta theta vartheta iota kappa lambda mu nu xi pi varpi rho sigma tau upsilon phi varphi chi psi omega Gamma Delta Theta Lambda Xi Pi Sigma Upsilon Phi Psi Omega";
const GREEK_CHARS = "αβγδεϵζηθϑικλμνξπϖρστυϕφχψωΓΔΘΛΞΠΣΥΦΨΩ";
const SYMBOLS = {
  times: "×", cdot: "⋅", pm: "±", mp: "∓", div: "÷", leq: "≤", le: "≤", geq: "≥", ge: "≥",
  neq: "≠", ne: "≠", approx: "≈", equiv: "≡", sim: "∼", propto: "∝", infty: "∞", partial: "∂",
  nabla: "∇", to: "→", rightarrow: "→", leftarrow: "←", Rightarrow: "⇒", iff: "⇔", in: "∈",
  notin: "∉", subset: "⊂", subseteq: "⊆", cup: "∪", cap: "∩", forall: "∀", exists: "∃",
  sum: "∑", prod: "∏", int: "∫", oint: "∮", ldots: "…", cdots: "⋯", dots: "…", circ: "∘",
  degree: "°", prime: "′", mid: "∣", ast: "∗", star: "⋆", angle: "∠", perp: "⊥", parallel: "∥",
  log: "log", ln: "ln", sin: "sin", cos: "cos", tan: "tan", exp: "exp", lim: "lim", max: "max",
  min: "min", det: "det", quad: " ", qquad: "  ", ",": " ", ";": " ", "!": "",
  "{": "{", "}": "}", "%": "%", "$": "$", "#": "#", "&": "&", "_": "_", "|": "‖",
};
GREEK.split(" ").forEach((name, i) => (SYMBOLS[name] = GREEK_CHARS[i]));

function el(tag, ...children) {
  const node = document.createElementNS(NS, tag);
  node.append(...children);
  return node;
}

function tokens(tex) {
  return tex.match(/\\[a-zA-Z]+|\\.|[a-zA-Z]|\d+(?:\.\d+)?|\S/g) || [];
}

class Parser {
  constructor(tex) { this.t = tokens(tex); this.i = 0; }
  peek() { return this.t[this.i]; }
  next() { return this.t[this.i++]; }
  group() { // one argument: {…} or a single token
    if (this.peek() === "{") {
      this.next();
      const row = this.row("}");
      this.next();
      return row;
    }
    return this.atom();
  }
  row(end) {
    const items = [];
    while (this.i < this.t.length && this.peek() !== end) {
      if (this.peek() === "}" || (end !== "\\right" && this.peek() === "\\right")) break;
      items.push(this.scripts(this.atom()));
    }
    return items.length === 1 ? items[0] : el("mrow", ...items);
  }
  scripts(base) {
    let sub = null, sup = null;
    while (this.peek() === "_" || this.peek() === "^") {
      const which = this.next();
      if (which === "_") sub = this.group(); else sup = this.group();
    }
    if (sub && sup) return el("msubsup", base, sub, sup);
    if (sub) return el("msub", base, sub);
    if (sup) return el("msup", base, sup);
    return base;
  }
  atom() {
    const t = this.next();
    if (t === undefined) throw new Error("end");
    if (t === "{") { const r = this.row("}"); this.next(); return r; }
    if (/^\d/.test(t)) return el("mn", t);
    if (/^[a-zA-Z]$/.test(t)) return el("mi", t);
    if (t === "\\frac" || t === "\\dfrac" || t === "\\tfrac") return el("mfrac", this.group(), this.group());
    if (t === "\\sqrt") {
      if (this.peek() === "[") {
        this.next();
        const index = this.row("]");
        this.next();
        return el("mroot", this.group(), index);
      }
      return el("msqrt", this.group());
    }
    if (t === "\\text" || t === "\\mathrm" || t === "\\operatorname") {
      const start = this.i;
      const arg = this.group();
      return el("mtext", arg.textContent || this.t.slice(start, this.i).join(""));
    }
    if (t === "\\mathbf" || t === "\\boldsymbol") { const g = this.group(); g.setAttribute?.("mathvariant", "bold"); return g; }
    if (t === "\\left" || t === "\\right") { const d = this.next(); return el("mo", d === "." ? "" : SYMBOLS[d.slice(1)] ?? d); }
    if (t.startsWith("\\")) {
      const name = t.slice(1);
      if (!(name in SYMBOLS)) throw new Error(`unknown \\${name}`);
      const s = SYMBOLS[name];
      if (GREEK.split(" ").includes(name)) return el("mi", s);
      return /^[a-z]{2,}$/.test(s) ? el("mi", s) : el("mo", s);
    }
    return el("mo", t);
  }
}

export function texToMathML(tex, display) {
  try {
    const parser = new Parser(tex);
    const body = parser.row(undefined);
    if (parser.i < parser.t.length) return null;
    const math = el("math", body);
    if (display) math.setAttribute("display", "block");
    math.setAttribute("aria-label", tex);
    return math;
  } catch {
    return null;
  }
}
