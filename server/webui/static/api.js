// The server's API as the page uses it: every call relative to the page (so --api-prefix
// works), with the key the user gave (kept in this browser's localStorage).
const KEY = "llamactl-api-key";

export class AuthError extends Error {}

export const apiKey = () => localStorage.getItem(KEY) || "";
export const setApiKey = (key) => (key ? localStorage.setItem(KEY, key) : localStorage.removeItem(KEY));

function url(path) {
  return new URL(path, document.baseURI).href;
}

function headers(extra = {}) {
  const h = { "Content-Type": "application/json", ...extra };
  const key = apiKey();
  if (key) h.Authorization = `Bearer ${key}`;
  return h;
}

async function failure(response) {
  let message = `HTTP ${response.status}`;
  try {
    const body = await response.json();
    message = body?.error?.message || body?.detail || message;
  } catch {
    /* not JSON */
  }
  return response.status === 401 ? new AuthError(message) : new Error(message);
}

export async function getJSON(path) {
  const response = await fetch(url(path), { headers: headers() });
  if (!response.ok) throw await failure(response);
  return response.json();
}

export async function postJSON(path, body) {
  const response = await fetch(url(path), { method: "POST", headers: headers(), body: JSON.stringify(body) });
  if (!response.ok) throw await failure(response);
  return response.json();
}

// POST a streamed request and call `onEvent` with each server-sent JSON event.
export async function stream(path, body, onEvent, signal) {
  const response = await fetch(url(path), { method: "POST", headers: headers(), body: JSON.stringify(body), signal });
  if (!response.ok) throw await failure(response);
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value;
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      const data = event.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trimStart()).join("\n");
      if (!data || data === "[DONE]") continue;
      const parsed = JSON.parse(data);
      if (parsed.error) throw new Error(parsed.error.message || "the server reported an error");
      onEvent(parsed);
    }
  }
}

// The realtime socket's URL and the subprotocols that carry the key (a browser cannot set
// headers on a websocket).
export function realtimeSocket() {
  const u = new URL("v1/realtime", document.baseURI);
  u.protocol = u.protocol === "https:" ? "wss:" : "ws:";
  const protocols = ["realtime"];
  if (apiKey()) protocols.push(`openai-insecure-api-key.${apiKey()}`);
  return new WebSocket(u.href, protocols);
}
