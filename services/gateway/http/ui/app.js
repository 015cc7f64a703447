// The web UI's router: hash routes, each rendered by a page module into
// <main id="view">; a page returns a cleanup function (stops its polls and
// streams) that runs when the route changes.
import { post, session } from "./api.js";
import { loginPage } from "./pages/login.js";
import { experimentsPage } from "./pages/experiments.js";
import { experimentPage } from "./pages/experiment.js";
import { trialPage } from "./pages/trial.js";
import { clusterPage } from "./pages/cluster.js";
import { taskPage, tasksPage } from "./pages/tasks.js";

const ROUTES = [
  [/^#\/login(?:\?.*)?$/, loginPage],
  [/^#\/experiments\/?$/, experimentsPage],
  [/^#\/experiments\/(\d+)(?:\/(history))?$/, experimentPage],
  [/^#\/trials\/(\d+)$/, trialPage],
  [/^#\/tasks\/?$/, tasksPage],
  [/^#\/tasks\/([\w-]+)$/, taskPage],
  [/^#\/cluster$/, clusterPage],
];

let cleanup = null;

function render() {
  const hash = location.hash || "#/experiments";
  if (!session.token && !hash.startsWith("#/login")) {
    location.replace("#/login?next=" + encodeURIComponent(hash));
    return;
  }
  if (cleanup) { cleanup(); cleanup = null; }
  const view = document.getElementById("view");
  view.replaceChildren();
  const nav = document.getElementById("nav");
  nav.hidden = hash.startsWith("#/login");
  document.getElementById("whoami").textContent = session.username;
  for (const link of nav.querySelectorAll("a")) {
    link.classList.toggle("active", hash.startsWith(link.getAttribute("href")));
  }
  for (const [pattern, page] of ROUTES) {
    const match = hash.match(pattern);
    if (match) {
      cleanup = page(view, ...match.slice(1)) || null;
      return;
    }
  }
  location.replace("#/experiments");
}

document.getElementById("nav-logout").addEventListener("click", async () => {
  try { await post("/auth/logout"); } catch { /* the token may be gone already */ }
  session.clear();
  location.hash = "#/login";
});

window.addEventListener("hashchange", render);
render();
