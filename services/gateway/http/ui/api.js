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
