// #/login: username and password; the token goes to sessionStorage (and the
// gateway's answer sets the cookie its /proxy/ routes read: a browser opening
// a notebook sends only cookies). `next`: the page to go to then, a route of
// this UI or a task's /proxy/<id>/ page (the proxy's 401 page links here so).
import { post, session } from "../api.js";
import { el } from "../util.js";

// Determined's clients send sha512(SALT + password) in hex, never the password as
// typed (determined/common/passwords.py). SubtleCrypto exists only in secure
// contexts (https, localhost): elsewhere the gateway applies the same hash.
const SALT = "GubPEmmotfiK9TMD6Zdw";
// The one place outside this UI that `next` may lead to (never another site).
const PROXY_PREFIX = "/proxy/";

async function loginBody(username, password) {
  if (!password || !(window.crypto && crypto.subtle)) return { username, password };
  const digest = await crypto.subtle.digest("SHA-512", new TextEncoder().encode(SALT + password));
  const hex = [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
  return { username, password: hex, isHashed: true };
}

export function loginPage(view) {
  const next = new URLSearchParams(location.hash.split("?")[1] || "").get("next") || "#/experiments";
  const username = el("input#login-username", { name: "username", autocomplete: "username", required: true });
  const password = el("input#login-password", { name: "password", type: "password", autocomplete: "current-password" });
  const error = el("p#login-error.error", { role: "alert", hidden: true });
  const submit = el("button#login-submit", { type: "submit" }, "Sign in");
  const form = el("form.login", {
    onsubmit: async (event) => {
      event.preventDefault();
      submit.disabled = true;
      error.hidden = true;
      try {
        const answer = await post("/auth/login", await loginBody(username.value, password.value));
        if (next.startsWith(PROXY_PREFIX)) {
          // The task's page comes next in this tab, from this origin: it gets the cookie the
          // answer set (HttpOnly), never the token (this tab's sessionStorage is its too).
          location.assign(next);
          return;
        }
        session.save(answer.token, answer.user.username);
        location.hash = next.startsWith("#/") && !next.startsWith("#/login") ? next : "#/experiments";
      } catch (failure) {
        error.textContent = failure.status === 401 || failure.status === 403
          ? "Wrong username or password." : `Could not log in: ${failure.message}`;
        error.hidden = false;
      } finally {
        submit.disabled = false;
      }
    },
  },
  el("h1", {}, "Sign in to Determined"),
  el("label", {}, "Username", username),
  el("label", {}, "Password", password),
  submit,
  error);
  view.append(form);
  username.focus();
}
