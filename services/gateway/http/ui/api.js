// Calls to the gateway's /api/v1: the Bearer token from login lives in
// sessionStorage; a 401 anywhere sends the page to the login form.

const TOKEN_KEY = "det-token";
const USER_KEY = "det-user";

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export const session = {
  get token() { return sessionStorage.getItem(TOKEN_KEY); },
  get username() { return sessionStorage.getItem(USER_KEY) || ""; },
  save(token, username) {
    sessionStorage.setItem(TOKEN_KEY, token);
    sessionStorage.setItem(USER_KEY, username);
  },
  clear() {
    sessionStorage.removeItem(TOKEN_KEY);
    sessionStorage.removeItem(USER_KEY);
  },
};

function notLoggedIn() {
  session.clear();
  if (!location.hash.startsWith("#/login")) {
    const back = location.hash && location.hash !== "#/login" ? location.hash : "";
    location.hash = "#/login" + (back ? "?next=" + encodeURIComponent(back) : "");
  }
}

async function call(method, path, body, signal) {
  const headers = {};
  if (session.token) headers.authorization = "Bearer " + session.token;
  if (body !== undefined) headers["content-type"] = "application/json";
  const answer = await fetch("/api/v1" + path, {
    method, headers, signal, body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (answer.status === 401 && path !== "/auth/login") notLoggedIn();
  if (!answer.ok) {
    let message = answer.statusText;
    try { message = (await answer.json()).message || message; } catch { /* not JSON */ }
    throw new ApiError(answer.status, message);
  }
  return answer;
}

export async function get(path, signal) {
  return (await call("GET", path, undefined, signal)).json();
}

export async function post(path, body = {}) {
  return (await call("POST", path, body)).json();
}

// Reads a newline-delimited JSON stream, calling onLine with each object's
// `result` (an `error` member ends the stream with that error).
export async function stream(path, signal, onLine) {
  const answer = await call("GET", path, undefined, signal);
  const reader = answer.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffered = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffered += value;
    const lines = buffered.split("\n");
    buffered = lines.pop();
    const results = [];
    for (const line of lines) {
      if (!line.trim()) continue;
      const item = JSON.parse(line);
      if (item.error) throw new ApiError(500, item.error.message);
      results.push(item.result);
    }
    if (results.length) onLine(results);
  }
}

// Calls onChange each time the server says what a page shows has changed: the
// page's server-sent events (`path`: e.g. "/experiments/stream"). EventSource
// cannot send the Bearer header, so the token goes as ?token= (the streams
// accept it; no other route does). It reconnects by itself after a drop, and
// a reconnection calls onChange too (changes may have come meanwhile). A
// hidden tab (or a page left for another) lets go of its stream and takes it up
// again when shown: a browser keeps at most 6 connections to a server over
// HTTP/1.1, and streams held open by background tabs would leave none for the
// visible one. Returns a stop function. The pages keep a slow poll besides, in
// case the stream is down. The header's #live shows whether the stream is
// open (data-state "open" or "down").
export function watch(path, onChange) {
  const url = "/api/v1" + path + (path.includes("?") ? "&" : "?") + "token=" + encodeURIComponent(session.token || "");
  const live = document.getElementById("live");
  const show = (state) => {
    live.dataset.state = state;
    live.textContent = state === "open" ? "● live" : "○ reconnecting";
  };
  let source = null;
  const open = () => {
    if (source) return;
    source = new EventSource(url);
    let opened = false;
    source.addEventListener("open", () => { show("open"); if (opened) onChange(); opened = true; });
    source.addEventListener("error", () => show("down"));
    source.addEventListener("changed", () => onChange());
  };
  const close = () => {
    if (source) source.close();
    source = null;
  };
  const onVisibility = () => {
    if (document.hidden) { close(); return; }
    open();
    onChange();  // what changed while hidden
  };
  const onShow = (event) => { if (event.persisted) onVisibility(); };
  document.addEventListener("visibilitychange", onVisibility);
  window.addEventListener("pagehide", close);
  window.addEventListener("pageshow", onShow);
  if (!document.hidden) open();
  return () => {
    close();
    document.removeEventListener("visibilitychange", onVisibility);
    window.removeEventListener("pagehide", close);
    window.removeEventListener("pageshow", onShow);
    live.textContent = "";
    delete live.dataset.state;
  };
}

// Saves a file the API serves (a checkpoint's file) under `name`: fetched with
// the token, since a plain link cannot send it.
export async function download(path, name) {
  const blob = await (await call("GET", path)).blob();
  const link = Object.assign(document.createElement("a"), { href: URL.createObjectURL(blob), download: name });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(link.href), 60_000);
}
