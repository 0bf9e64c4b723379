// llamactl's chat page: conversations in the browser, answers streamed from
// /v1/chat/completions, reasoning shown live with a skip button, attachments for models with
// a projector, a model picker in router mode, and voice through /v1/realtime.
import { AuthError, getJSON, postJSON, setApiKey, stream } from "./api.js";
import { renderMarkdown } from "./markdown.js";
import * as store from "./store.js";
import { VoiceSession } from "./voice.js";

const $ = (id) => document.getElementById(id);
const SAMPLING = ["temperature", "top_p", "top_k", "min_p", "max_tokens", "seed"];

const state = {
  conversations: [],
  conv: null,
  models: [], // what /v1/models lists
  model: null, // the model requests name
  router: false,
  busy: null, // { controller, id, message } while an answer streams
  attachments: [], // { kind: "image" | "audio", name, url | data, format }
  voice: null,
};

// ------------------------------------------------------------------ start
async function start() {
  applyTheme(localStorage.getItem("llamactl-theme"));
  bindControls();
  state.conversations = await store.listConversations();
  state.conv = state.conversations[0] || store.newConversation();
  renderSidebar();
  renderConversation();
  await loadModels();
}

async function loadModels() {
  try {
    const listed = await getJSON("v1/models");
    state.models = listed.data || [];
  } catch (error) {
    if (error instanceof AuthError) return askForKey();
    return notice(`Could not reach the server: ${error.message}`);
  }
  state.router = state.models.some((m) => m.status);
  if (!state.model || !state.models.some((m) => m.id === state.model)) {
    const loaded = state.models.find((m) => !m.status || m.status.value === "loaded");
    state.model = (loaded || state.models[0])?.id ?? null;
  }
  renderPicker();
  renderAttachButton();
}

function current() {
  return state.models.find((m) => m.id === state.model);
}

function modalities() {
  return current()?.architecture?.input_modalities || ["text"];
}

// ------------------------------------------------------------------ the key
function askForKey(message) {
  const dialog = $("key-dialog");
  $("key-error").hidden = !message;
  $("key-error").textContent = message || "";
  if (!dialog.open) dialog.showModal();
}

async function keyGiven(event) {
  event.preventDefault();
  const key = new FormData($("key-form")).get("key").trim();
  if (!key) return;
  setApiKey(key);
  try {
    await getJSON("v1/models");
  } catch (error) {
    setApiKey("");
    return askForKey(error instanceof AuthError ? "That key was refused." : error.message);
  }
  $("key-dialog").close();
  await loadModels();
}

// ------------------------------------------------------------------ sidebar
function renderSidebar() {
  const list = $("conversations");
  list.replaceChildren();
  const shown = state.conversations.some((c) => c.id === state.conv.id) ? state.conversations : [state.conv, ...state.conversations];
  for (const conv of shown) {
    const item = document.createElement("li");
    const button = document.createElement("button");
    button.type = "button";
    button.textContent = conv.title;
    button.title = conv.title;
    if (conv.id === state.conv.id) button.setAttribute("aria-current", "true");
    button.addEventListener("click", () => openConversation(conv.id));
    item.append(button);
    list.append(item);
  }
}

function renderPicker() {
  $("model-picker-label").hidden = !state.router;
  if (!state.router) return;
  const select = $("model-picker");
  select.replaceChildren();
  for (const m of state.models) {
    const option = document.createElement("option");
    option.value = m.id;
    option.textContent = `${m.id} (${m.status?.value ?? "loaded"})`;
    option.selected = m.id === state.model;
    select.append(option);
  }
  const status = current()?.status?.value;
  $("model-status").textContent = status === "loaded" ? "" : status === "failed" ? `failed: ${current().status.message || ""}` : status || "";
}

async function pickModel() {
  state.model = $("model-picker").value;
  const status = current()?.status?.value;
  renderAttachButton();
  if (status === "loaded" || status === "loading") return renderPicker();
  $("model-status").textContent = "loading…";
  try {
    await postJSON("models/load", { model: state.model });
  } catch (error) {
    $("model-status").textContent = `could not load: ${error.message}`;
    return;
  }
  await waitForModel(state.model);
}

async function waitForModel(id) {
  for (let i = 0; i < 600; i++) {
    await loadModels();
    const status = state.models.find((m) => m.id === id)?.status?.value;
    if (status !== "loading" && status !== "unloaded") return;
    await new Promise((r) => setTimeout(r, 1000));
  }
}

// ------------------------------------------------------------------ conversations
async function openConversation(id) {
  if (state.busy) return;
  state.conv = state.conversations.find((c) => c.id === id) || state.conv;
  renderSidebar();
  renderConversation();
}

async function persist() {
  await store.saveConversation(state.conv);
  state.conversations = await store.listConversations();
  renderSidebar();
}

function newChat() {
  if (state.busy) return;
  state.conv = store.newConversation();
  renderSidebar();
  renderConversation();
  $("input").focus();
}

async function renameChat() {
  const title = prompt("Name this chat", state.conv.title);
  if (!title?.trim()) return;
  state.conv.title = title.trim();
  $("title").textContent = state.conv.title;
  await persist();
}

async function deleteChat() {
  if (state.busy || !confirm(`Delete "${state.conv.title}"?`)) return;
  await store.deleteConversation(state.conv.id);
  state.conversations = await store.listConversations();
  state.conv = state.conversations[0] || store.newConversation();
  renderSidebar();
  renderConversation();
}

function exportChats() {
  const blob = new Blob([JSON.stringify({ conversations: state.conversations }, null, 2)], { type: "application/json" });
  const a = document.createElement("a");
  a.href = URL.createObjectURL(blob);
  a.download = `llamactl-chats-${new Date().toISOString().slice(0, 10)}.json`;
  a.click();
  setTimeout(() => URL.revokeObjectURL(a.href), 1000);
}

// ------------------------------------------------------------------ rendering
function renderConversation() {
  $("title").textContent = state.conv.title;
  const box = $("messages");
  box.replaceChildren(...store.branch(state.conv).map(messageView));
  box.scrollTop = box.scrollHeight;
}

function messageView(message) {
  const view = document.createElement("article");
  view.className = `message ${message.role}`;
  view.dataset.id = message.id;
  view.setAttribute("aria-label", message.role === "user" ? "You" : "Assistant");
  const role = document.createElement("div");
  role.className = "role";
  role.textContent = message.role === "user" ? "You" : message.model || "Assistant";
  view.append(role);
  if (message.role === "assistant") view.append(reasoningView(message));
  const body = document.createElement("div");
  body.className = "body";
  fillBody(body, message);
  view.append(body, metaView(message));
  return view;
}

function reasoningView(message) {
  const details = document.createElement("details");
  details.className = "reasoning";
  details.hidden = !message.reasoning;
  details.open = Boolean(message.streaming && !message.content);
  const summary = document.createElement("summary");
  summary.textContent = message.streaming && !message.content ? "Thinking…" : "Reasoning";
  const text = document.createElement("div");
  text.className = "text";
  text.textContent = message.reasoning || "";
  details.append(summary, text);
  return details;
}

function fillBody(body, message) {
  body.replaceChildren();
  for (const a of message.attachments || []) {
    if (a.kind === "image") {
      const img = document.createElement("img");
      img.className = "attachment";
      img.src = a.url;
      img.alt = a.name || "an attached image";
      body.append(img);
    } else {
      const note = document.createElement("p");
      note.className = "muted";
      note.textContent = `Audio: ${a.name || "attached"}`;
      body.append(note);
    }
  }
  if (message.role === "user") {
    const p = document.createElement("div");
    p.style.whiteSpace = "pre-wrap";
    p.textContent = message.content;
    body.append(p);
  } else {
    body.append(renderMarkdown(message.content || ""));
  }
  if (message.error) {
    const e = document.createElement("p");
    e.className = "error";
    e.setAttribute("role", "alert");
    e.textContent = message.error;
    body.append(e);
  }
}

function metaView(message) {
  const meta = document.createElement("div");
  meta.className = "meta";
  const { ids, index } = store.siblings(state.conv, message);
  if (ids.length > 1) {
    meta.append(
      button("‹", `Previous version (${index + 1} of ${ids.length})`, () => switchBranch(ids[index - 1]), index === 0),
      text(`${index + 1}/${ids.length}`),
      button("›", `Next version (${index + 1} of ${ids.length})`, () => switchBranch(ids[index + 1]), index === ids.length - 1),
    );
  }
  if (message.role === "assistant" && !message.streaming) {
    const m = message.meta || {};
    if (m.tokens_per_second) meta.append(text(`${m.tokens_per_second.toFixed(1)} tokens/s`));
    if (m.cached_tokens !== undefined) meta.append(text(`${m.cached_tokens} cached`));
    if (m.stopped) meta.append(text("stopped"));
    meta.append(button("Regenerate", "Regenerate this answer", () => regenerate(message)));
    meta.append(button("Copy", "Copy this answer", () => navigator.clipboard.writeText(message.content || "")));
  }
  if (message.role === "user" && !state.busy) meta.append(button("Edit", "Edit this message", () => edit(message)));
  return meta;
}

function button(label, aria, action, disabled = false) {
  const b = document.createElement("button");
  b.type = "button";
  b.textContent = label;
  b.setAttribute("aria-label", aria);
  b.disabled = disabled;
  b.addEventListener("click", action);
  return b;
}

function text(content) {
  const span = document.createElement("span");
  span.textContent = content;
  return span;
}

function switchBranch(id) {
  if (state.busy || !id) return;
  store.showBranch(state.conv, id);
  renderConversation();
  persist();
}

let redrawQueued = false;
function redrawStreaming() {
  if (redrawQueued) return;
  redrawQueued = true;
  requestAnimationFrame(() => {
    redrawQueued = false;
    const message = state.busy?.message;
    if (!message) return;
    const view = document.querySelector(`article[data-id="${message.id}"]`);
    if (!view) return;
    const box = $("messages");
    const atEnd = box.scrollHeight - box.scrollTop - box.clientHeight < 40;
    updateStreaming(view, message);
    if (atEnd) box.scrollTop = box.scrollHeight;
  });
}

// The streaming message is changed in place, not rebuilt: a button the user is pressing
// (Skip reasoning) must stay the same element while text arrives.
function updateStreaming(view, message) {
  const details = view.querySelector("details.reasoning");
  const thinking = !message.content && Boolean(message.reasoning);
  details.hidden = !message.reasoning;
  details.querySelector(".text").textContent = message.reasoning || "";
  details.querySelector("summary").textContent = thinking ? "Thinking…" : "Reasoning";
  if (thinking && !details.dataset.opened) {
    details.open = true;
    details.dataset.opened = "1"; // opened once; the user may close it
  }
  const skip = details.querySelector("button.skip");
  if (thinking && !skip) {
    const button = document.createElement("button");
    button.type = "button";
    button.className = "skip";
    button.textContent = "Skip reasoning";
    button.addEventListener("click", skipReasoning);
    details.append(button);
  } else if (!thinking && skip) {
    skip.remove();
  }
  fillBody(view.querySelector(".body"), message);
}

// ------------------------------------------------------------------ asking
async function send(event) {
  event?.preventDefault();
  if (state.busy) return;
  const content = $("input").value.trim();
  if (!content && !state.attachments.length) return;
  const parent = state.conv.leaf;
  store.addMessage(state.conv, parent, { role: "user", content, attachments: state.attachments });
  if (state.conv.title === "New chat" && content) state.conv.title = content.slice(0, 48);
  renderSidebar();
  $("input").value = "";
  state.attachments = [];
  renderAttachments();
  await answer();
}

async function regenerate(message) {
  if (state.busy) return;
  state.conv.leaf = message.parent;
  await answer();
}

function edit(message) {
  if (state.busy) return;
  const view = document.querySelector(`article[data-id="${message.id}"] .body`);
  const area = document.createElement("textarea");
  area.value = message.content;
  area.rows = Math.min(12, message.content.split("\n").length + 1);
  area.setAttribute("aria-label", "Edited message");
  area.style.width = "100%";
  const save = button("Send", "Send the edited message", async () => {
    store.addMessage(state.conv, message.parent, { role: "user", content: area.value.trim(), attachments: message.attachments || [] });
    await answer();
  });
  const cancel = button("Cancel", "Cancel the edit", renderConversation);
  view.replaceChildren(area, save, cancel);
  area.focus();
}

function requestMessages() {
  const settings = state.conv.settings || {};
  const messages = settings.system ? [{ role: "system", content: settings.system }] : [];
  for (const m of store.branch(state.conv)) {
    if (m.error && !m.content) continue;
    if (m.role === "user" && m.attachments?.length) {
      const parts = m.attachments.map((a) =>
        a.kind === "image"
          ? { type: "image_url", image_url: { url: a.url } }
          : { type: "input_audio", input_audio: { data: a.data, format: a.format } },
      );
      if (m.content) parts.push({ type: "text", text: m.content });
      messages.push({ role: "user", content: parts });
    } else {
      messages.push({ role: m.role, content: m.content || "" });
    }
  }
  return messages;
}

function requestBody() {
  const body = {
    messages: requestMessages(),
    stream: true,
    stream_options: { include_usage: true },
    reasoning_control: true, // the skip button may end the reasoning
  };
  if (state.model) body.model = state.model;
  for (const name of SAMPLING) {
    const value = state.conv.settings?.[name];
    if (value !== undefined && value !== "" && value !== null) body[name] = Number(value);
  }
  return body;
}

async function answer() {
  const message = store.addMessage(state.conv, state.conv.leaf, { role: "assistant", content: "", reasoning: "", streaming: true, model: state.model });
  const controller = new AbortController();
  state.busy = { controller, id: null, message };
  setBusy(true);
  renderConversation();
  const started = performance.now();
  try {
    await stream("v1/chat/completions", requestBody(), (chunk) => {
      state.busy.id ??= chunk.id;
      if (chunk.model) message.model = chunk.model;
      const delta = chunk.choices?.[0]?.delta || {};
      if (delta.reasoning_content) message.reasoning += delta.reasoning_content;
      if (delta.content) message.content += delta.content;
      if (chunk.timings) message.meta = { ...message.meta, tokens_per_second: chunk.timings.predicted_per_second, cached_tokens: chunk.timings.cache_n };
      if (chunk.usage) message.meta = { ...message.meta, cached_tokens: chunk.usage.prompt_tokens_details?.cached_tokens ?? message.meta?.cached_tokens };
      redrawStreaming();
    }, controller.signal);
  } catch (error) {
    if (error.name === "AbortError") message.meta = { ...message.meta, stopped: true };
    else if (error instanceof AuthError) { message.error = error.message; askForKey("The server asks for a key."); }
    else message.error = error.message;
  }
  message.meta = { seconds: (performance.now() - started) / 1000, ...message.meta };
  delete message.streaming;
  state.busy = null;
  setBusy(false);
  renderConversation();
  await persist();
}

function stopAnswer() {
  state.busy?.controller.abort();
}

async function skipReasoning() {
  const id = state.busy?.id;
  if (!id) return;
  try {
    await postJSON("v1/chat/completions/control", { id, action: "reasoning_end", model: state.model || undefined });
  } catch (error) {
    notice(`Could not skip the reasoning: ${error.message}`);
  }
}

function setBusy(busy) {
  $("send").hidden = busy;
  $("stop").hidden = !busy;
  if (!busy) $("input").focus();
}

// ------------------------------------------------------------------ attachments
function renderAttachButton() {
  const kinds = modalities();
  $("attach").title = kinds.includes("image") || kinds.includes("audio") ? "Attach an image or audio" : "This model reads text only";
}

async function attach(files) {
  const kinds = modalities();
  for (const file of files) {
    const kind = file.type.startsWith("image/") ? "image" : file.type.startsWith("audio/") ? "audio" : null;
    if (!kind) { notice(`${file.name}: only images and audio can be attached.`); continue; }
    if (!kinds.includes(kind)) {
      notice(`${current()?.id || "This model"} cannot ${kind === "image" ? "see images" : "hear audio"}: start the server with a projector that does (--mmproj).`);
      continue;
    }
    const url = await new Promise((resolve, reject) => {
      const reader = new FileReader();
      reader.onload = () => resolve(reader.result);
      reader.onerror = () => reject(reader.error);
      reader.readAsDataURL(file);
    });
    if (kind === "image") state.attachments.push({ kind, name: file.name, url });
    else state.attachments.push({ kind, name: file.name, data: url.split(",")[1], format: file.type.includes("mpeg") || file.name.endsWith(".mp3") ? "mp3" : "wav" });
  }
  renderAttachments();
}

function renderAttachments() {
  const box = $("attachments");
  box.replaceChildren(...state.attachments.map((a, i) => {
    const chip = document.createElement("span");
    chip.className = "chip";
    if (a.kind === "image") {
      const img = document.createElement("img");
      img.src = a.url;
      img.alt = "";
      chip.append(img);
    }
    chip.append(text(a.name || a.kind), button("×", `Remove ${a.name || a.kind}`, () => { state.attachments.splice(i, 1); renderAttachments(); }));
    return chip;
  }));
}

function notice(message) {
  const box = $("notice");
  box.textContent = message;
  box.hidden = !message;
  clearTimeout(notice.timer);
  if (message) notice.timer = setTimeout(() => (box.hidden = true), 8000);
}

// ------------------------------------------------------------------ settings and theme
function openSettings() {
  const form = $("settings-form");
  const settings = state.conv.settings || {};
  form.elements.system.value = settings.system || "";
  for (const name of SAMPLING) form.elements[name].value = settings[name] ?? "";
  $("settings").showModal();
}

async function settingsClosed() {
  if ($("settings").returnValue !== "save") return;
  const form = $("settings-form");
  const settings = { system: form.elements.system.value.trim() };
  for (const name of SAMPLING) if (form.elements[name].value !== "") settings[name] = Number(form.elements[name].value);
  state.conv.settings = settings;
  await persist();
}

function applyTheme(theme) {
  if (theme) document.documentElement.dataset.theme = theme;
  else delete document.documentElement.dataset.theme;
}

function toggleTheme() {
  const dark = document.documentElement.dataset.theme
    ? document.documentElement.dataset.theme === "dark"
    : matchMedia("(prefers-color-scheme: dark)").matches;
  const theme = dark ? "light" : "dark";
  localStorage.setItem("llamactl-theme", theme);
  applyTheme(theme);
}

// ------------------------------------------------------------------ voice
async function toggleVoice() {
  const talk = $("talk");
  if (state.voice) {
    state.voice.stop();
    state.voice = null;
    talk.setAttribute("aria-pressed", "false");
    $("voice-panel").hidden = true;
    return;
  }
  const log = $("voice-log");
  let answerLine = null;
  const line = (who, content) => {
    const p = document.createElement("p");
    p.className = who;
    p.textContent = content;
    log.append(p);
    log.scrollTop = log.scrollHeight;
    return p;
  };
  const ui = {
    state: (s) => ($("voice-state").textContent = s),
    heard: (t) => line("you", `You: ${t}`),
    answerDelta: (d) => {
      answerLine ??= line("assistant", "");
      answerLine.textContent += d;
    },
    answerDone: () => (answerLine = null),
    error: (m) => { line("error", m); $("voice-state").textContent = m; },
  };
  $("voice-panel").hidden = false;
  talk.setAttribute("aria-pressed", "true");
  state.voice = new VoiceSession(ui, $("turn-mode").value);
  try {
    await state.voice.start();
  } catch (error) {
    ui.error(`Voice could not start: ${error.message}`);
    state.voice?.stop();
    state.voice = null;
    talk.setAttribute("aria-pressed", "false");
  }
}

// ------------------------------------------------------------------ wiring
function bindControls() {
  $("composer").addEventListener("submit", send);
  $("input").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) send(e);
  });
  document.addEventListener("keydown", (e) => {
    if (e.key === "Escape" && state.busy) stopAnswer();
  });
  $("stop").addEventListener("click", stopAnswer);
  $("new-chat").addEventListener("click", newChat);
  $("rename").addEventListener("click", renameChat);
  $("delete").addEventListener("click", deleteChat);
  $("export").addEventListener("click", exportChats);
  $("theme").addEventListener("click", toggleTheme);
  $("settings-open").addEventListener("click", openSettings);
  $("settings").addEventListener("close", settingsClosed);
  $("key-form").addEventListener("submit", keyGiven);
  $("model-picker").addEventListener("change", pickModel);
  $("attach").addEventListener("click", () => $("file").click());
  $("file").addEventListener("change", (e) => { attach([...e.target.files]); e.target.value = ""; });
  $("input").addEventListener("paste", (e) => {
    const files = [...(e.clipboardData?.files || [])];
    if (files.length) { e.preventDefault(); attach(files); }
  });
  const composer = $("composer");
  composer.addEventListener("dragover", (e) => e.preventDefault());
  composer.addEventListener("drop", (e) => { e.preventDefault(); attach([...e.dataTransfer.files]); });
  $("talk").addEventListener("click", toggleVoice);
}

start().catch((error) => notice(`The page could not start: ${error.message}`));
