// Conversations, kept in this browser's IndexedDB (nothing is stored on the server).
// A conversation is a tree of messages: editing a message or regenerating an answer adds a
// sibling branch, and `leaf` names the end of the branch on screen.
const DB = "llamactl-webui";
const STORE = "conversations";

function open() {
  return new Promise((resolve, reject) => {
    const req = indexedDB.open(DB, 1);
    req.onupgradeneeded = () => req.result.createObjectStore(STORE, { keyPath: "id" });
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
  });
}

async function run(mode, act) {
  const db = await open();
  try {
    return await new Promise((resolve, reject) => {
      const tx = db.transaction(STORE, mode);
      const req = act(tx.objectStore(STORE));
      tx.oncomplete = () => resolve(req?.result);
      tx.onerror = () => reject(tx.error);
    });
  } finally {
    db.close();
  }
}

export const listConversations = async () =>
  ((await run("readonly", (s) => s.getAll())) || []).sort((a, b) => b.updated - a.updated);
export const saveConversation = (c) => run("readwrite", (s) => s.put({ ...c, updated: Date.now() }));
export const deleteConversation = (id) => run("readwrite", (s) => s.delete(id));

export function newConversation() {
  const now = Date.now();
  return { id: crypto.randomUUID(), title: "New chat", created: now, updated: now, settings: {}, messages: {}, leaf: null };
}

export function addMessage(conv, parent, message) {
  const id = crypto.randomUUID();
  conv.messages[id] = { id, parent, children: [], ...message };
  if (parent) conv.messages[parent].children.push(id);
  conv.leaf = id;
  return conv.messages[id];
}

// The branch on screen, root first.
export function branch(conv) {
  const path = [];
  for (let id = conv.leaf; id; id = conv.messages[id]?.parent) path.unshift(conv.messages[id]);
  return path;
}

// The siblings of a message (the branches at its place), and which one it is.
export function siblings(conv, message) {
  const ids = message.parent
    ? conv.messages[message.parent].children
    : Object.values(conv.messages).filter((m) => !m.parent).map((m) => m.id);
  return { ids, index: ids.indexOf(message.id) };
}

// Show another branch: from `id` down, following each message's latest child.
export function showBranch(conv, id) {
  let leaf = id;
  while (conv.messages[leaf].children.length) leaf = conv.messages[leaf].children.at(-1);
  conv.leaf = leaf;
}
