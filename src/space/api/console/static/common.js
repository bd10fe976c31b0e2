// Shared by every console page: the tab's API key (sessionStorage only), /v1 calls with
// `Authorization: Bearer`, SSE over fetch, and DOM building that renders values as text
// (never innerHTML), so nothing a sandbox or a user wrote can become markup.
const KEY = "space.console.key";

export const sessionKey = () => sessionStorage.getItem(KEY);
export const remember = (key) => sessionStorage.setItem(KEY, key);

export function toLogin() {
  sessionStorage.removeItem(KEY);
  const next = location.pathname + location.search;
  location.assign("/console/login?next=" + encodeURIComponent(next));
}

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

async function errorOf(response) {
  let message = `HTTP ${response.status}`;
  try {
    const body = await response.json();
    message = body?.error?.message ?? body?.message ?? message;
  } catch {
    // not JSON: keep the status
  }
  return new ApiError(response.status, message);
}

// fetch `path` as the logged-in key; JSON in (`json`) and out (unless `raw`).
export async function api(path, { method = "GET", json, body, headers = {}, raw = false, signal, key } = {}) {
  const sent = { Authorization: "Bearer " + (key ?? sessionKey()), ...headers };
  if (json !== undefined) {
    sent["Content-Type"] = "application/json";
    body = JSON.stringify(json);
  }
  const response = await fetch(path, { method, headers: sent, body, signal, credentials: "omit", cache: "no-store" });
  if (response.status === 401 && key === undefined) {
    toLogin();
    throw new ApiError(401, "not logged in");
  }
  if (!response.ok) throw await errorOf(response);
  if (raw) return response;
  return response.status === 204 ? null : response.json();
}

// An element with attributes and children; strings become text nodes.
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (value !== undefined && value !== null && value !== false) node.setAttribute(name, String(value));
  }
  node.append(...children.map((child) => (child instanceof Node ? child : String(child ?? ""))));
  return node;
}

export function rows(tbody, items, render) {
  tbody.replaceChildren(...items.map((item) => el("tr", {}, ...render(item).map((cell) => el("td", {}, cell)))));
}

export function showError(error) {
  const box = document.getElementById("error");
  box.textContent = error ? String(error.message ?? error) : "";
  box.hidden = !error;
}

// Run `work`, showing its failure (if any) in the page's error box.
export async function guarded(work) {
  try {
    showError(null);
    return await work();
  } catch (error) {
    showError(error);
    return undefined;
  }
}

export function age(iso) {
  const seconds = Math.max(0, Math.round((Date.now() - Date.parse(iso)) / 1000));
  if (seconds < 120) return `${seconds}s`;
  if (seconds < 7200) return `${Math.round(seconds / 60)}m`;
  if (seconds < 172800) return `${Math.round(seconds / 3600)}h`;
  return `${Math.round(seconds / 86400)}d`;
}

export const when = (iso) => (iso ? new Date(iso).toLocaleString() : "");
export const sandboxPath = (id) => "/console/sandboxes/" + encodeURIComponent(id);
export const v1Sandbox = (id) => "/v1/sandboxes/" + encodeURIComponent(id);

export function base64url(text) {
  const bytes = new TextEncoder().encode(text);
  let binary = "";
  for (const byte of bytes) binary += String.fromCharCode(byte);
  return btoa(binary).replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, "");
}

export function fromBase64(data) {
  const binary = atob(data);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

// Server-sent events read with fetch (EventSource cannot send Authorization).
export async function* events(path, { signal } = {}) {
  const response = await api(path, { raw: true, signal, headers: { Accept: "text/event-stream" } });
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value.replaceAll("\r\n", "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const event = { event: "message", id: null, data: [] };
      for (const line of block.split("\n")) {
        if (!line || line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        const text = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (field === "data") event.data.push(text);
        else if (field === "event") event.event = text;
        else if (field === "id") event.id = text;
      }
      if (event.data.length) yield { ...event, data: event.data.join("\n") };
    }
  }
}

// Every page but the login: a key is needed; the header shows whose it is.
export async function start() {
  if (!sessionKey()) {
    toLogin();
    return null;
  }
  document.getElementById("logout").addEventListener("click", () => {
    sessionStorage.removeItem(KEY);
    location.assign("/console/login");
  });
  const page = document.body.dataset.page;
  for (const link of document.querySelectorAll("[data-nav]")) {
    if (link.dataset.nav === page || (link.dataset.nav === "sandboxes" && document.body.dataset.sandbox)) {
      link.classList.add("current");
    }
  }
  const me = await guarded(() => api("/console/api/whoami"));
  if (me) document.getElementById("whoami").textContent = `org ${me.org} · ${me.role}${me.admin ? " (operator)" : ""}`;
  return me;
}
