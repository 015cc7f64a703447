// #/tasks: every notebook, TensorBoard, command and shell the user may see,
// with Open (a ready notebook's or TensorBoard's server, through the gateway's
// /proxy/<id>/), Kill and Logs; #/tasks/<id>: one task and its logs, followed
// while it runs. A task's lifecycle is allocation events, which wake the
// cluster page's stream: both pages listen to it, else ask every 30 s.
// `launchAndOpen`: the experiment page's "Open TensorBoard".
import { get, post, watch } from "../api.js";
import { logView } from "../logs.js";
import { coalesced, duration, el, errorBox, FALLBACK_POLL_MS, poll, setText, stateName, syncRows, toYaml, when } from "../util.js";
import { canTransition, TASK_TRANSITIONS, TASK_TYPES } from "../states.js";

const KIND_NAMES = { NOTEBOOK: "Notebook", TENSORBOARD: "TensorBoard", COMMAND: "Command", SHELL: "Shell" };
// The kinds whose server a browser opens (the others are reached from the CLI).
const OPENED_KINDS = new Set(["NOTEBOOK", "TENSORBOARD"]);
const COLUMNS = ["ID", "Kind", "Description", "Owner", "State", "Agent", "Started", "Ended", "Exit", ""];

export function kindName(taskType) {
  return KIND_NAMES[taskType] || taskType;
}

// Where the browser opens a task's server: the gateway forwards it there.
export function proxyPath(taskId) {
  return `/proxy/${encodeURIComponent(taskId)}/`;
}

// Whether the browser may open the task's server now.
export function openable(task) {
  return OPENED_KINDS.has(task.taskType) && task.ready && stateName(task.state) === "RUNNING";
}

function exitCode(task) {
  return task.exitCode === null || task.exitCode === undefined ? "" : String(task.exitCode);
}

// The task's end in a few words: why it ended ("exited with code 3", "killed
// by alice"), else its exit code; "" while it runs.
export function exitSummary(task) {
  return task.exitReason || (exitCode(task) && `exit code ${exitCode(task)}`);
}

function killable(task) {
  return canTransition(TASK_TRANSITIONS, stateName(task.state), "TERMINATING");
}

// Whether the task has ended: it changes no more.
function ended(task) {
  return TASK_TRANSITIONS[stateName(task.state)]?.length === 0;
}

// Asks the gateway to kill the task; says on `message` when it was not (already ended).
async function kill(task, message) {
  try {
    const answer = await post(`/tasks/${encodeURIComponent(task.id)}/kill`);
    if (answer.unchangedReason) message.replaceChildren(el("p.empty", {}, answer.unchangedReason));
  } catch (error) {
    message.replaceChildren(errorBox(error));
  }
}

function openLink(task) {
  return el("a.open", { href: proxyPath(task.id), target: "_blank", rel: "noopener noreferrer" }, "Open");
}

export function tasksPage(view) {
  const kindFilter = el("select#task-kind-filter", {}, el("option", { value: "" }, "All kinds"),
    TASK_TYPES.map((t) => el("option", { value: t }, kindName(t))));
  const showEnded = el("input#tasks-show-ended", { type: "checkbox", checked: true });
  const message = el("div.message");
  const tbody = el("tbody");
  view.append(
    el("h1", {}, "Tasks"),
    el("div.toolbar", {}, kindFilter, el("label", {}, showEnded, " Show ended tasks")),
    message,
    el("table#tasks-table", {}, el("thead", {}, el("tr", {}, COLUMNS.map((t) => el("th", {}, t)))), tbody),
  );

  let asked = 0;
  async function refresh() {
    const ticket = ++asked;
    const params = new URLSearchParams({ task_type: kindFilter.value, include_terminated: showEnded.checked });
    try {
      const { tasks } = await get("/tasks?" + params);
      if (ticket !== asked) return;  // a newer request is on its way
      message.replaceChildren(...(tasks.length ? [] : [el("p.empty", {}, "No tasks.")]));
      tasks.sort((a, b) => (b.startTime || "").localeCompare(a.startTime || "") || a.id.localeCompare(b.id));
      syncRows(tbody, tasks, (t) => t.id, createRow, updateRow);
    } catch (error) {
      message.replaceChildren(errorBox(error));
    }
  }

  function createRow(task) {
    const page = `#/tasks/${encodeURIComponent(task.id)}`;
    const killButton = el("button.kill", { type: "button" }, "Kill");
    killButton.addEventListener("click", async () => {
      killButton.disabled = true;
      await kill(task, message);
      changed();
    });
    return el("tr", { "data-task-id": task.id },
      el("td.uuid", {}, el("a", { href: page, title: task.id }, task.id.slice(0, 8))),
      el("td.kind"), el("td.description"), el("td.owner"), el("td.state"), el("td.agent"), el("td.started"),
      el("td.ended"), el("td.exit"),
      el("td.actions", {}, openLink(task), " ", killButton, " ", el("a.task-logs", { href: page }, "Logs")));
  }

  function updateRow(row, task) {
    const state = stateName(task.state);
    [kindName(task.taskType), task.description, task.owner, state, task.agentId, when(task.startTime),
      when(task.endTime), exitSummary(task)].forEach((v, i) => setText(row.cells[i + 1], v));
    row.cells[4].dataset.state = state;
    const actions = row.cells[9];
    actions.querySelector("a.open").hidden = !openable(task);
    actions.querySelector("button.kill").disabled = !killable(task);
  }

  kindFilter.addEventListener("change", () => refresh());
  showEnded.addEventListener("change", () => refresh());
  const changed = coalesced(refresh);
  const unwatch = watch("/cluster/stream", changed);
  const stop = poll(changed, FALLBACK_POLL_MS);
  return () => { unwatch(); stop(); };
}

export function taskPage(view, id) {
  const title = el("h1", {}, `Task ${id.slice(0, 8)}`);
  const state = el("span#task-state.state");
  const open = el("a#task-open.open", { href: proxyPath(id), target: "_blank", rel: "noopener noreferrer", hidden: true }, "Open");
  const killButton = el("button#task-kill.kill", { type: "button", disabled: true }, "Kill");
  const facts = el("dl.facts");
  const message = el("div.message");
  const config = el("pre#task-config");
  const configSection = el("section", { hidden: true }, el("h2", {}, "Configuration"), config);
  const logs = logView(`/tasks/${encodeURIComponent(id)}/logs?follow=true`, "task-logs");
  view.append(
    el("div.heading", {}, title, state, el("span.spacer"), open, killButton),
    message,
    facts,
    el("h2", {}, "Logs"),
    logs.toolbar,
    logs.logs,
    configSection,
  );
  let task = null;

  async function refresh() {
    if (task && ended(task)) return;
    try {
      task = (await get(`/tasks/${encodeURIComponent(id)}`)).task;
      show();
    } catch (error) {
      message.replaceChildren(errorBox(error));
    }
  }

  function show() {
    const name = stateName(task.state);
    setText(title, `${kindName(task.taskType)} ${id.slice(0, 8)}`);
    setText(state, name);
    state.dataset.state = name;
    open.hidden = !openable(task);
    killButton.disabled = !killable(task);
    const links = (ids, route) => ids.flatMap((n, i) => [i ? ", " : "", el("a", { href: `#/${route}/${n}` }, n)]);
    const rows = [
      ["ID", task.id], ["Description", task.description], ["Owner", task.owner],
      ["Command", (task.command || []).join(" ")],
      ["Experiments", (task.experimentIds || []).length ? links(task.experimentIds, "experiments") : ""],
      ["Trials", (task.trialIds || []).length ? links(task.trialIds, "trials") : ""],
      ["Resource pool", task.resourcePool], ["Slots", task.slots], ["Priority", task.priority],
      ["Agent", task.agentId], ["Started", when(task.startTime)], ["Ended", when(task.endTime)],
      ["Duration", duration(task.startTime, task.endTime)], ["Exit code", exitCode(task)],
      ["Why it ended", task.exitReason], ["Job", task.jobId],
    ].filter(([, value]) => value !== "" && value !== null && value !== undefined);
    facts.replaceChildren(...rows.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
    const text = task.config ? toYaml(task.config).replace(/^\n/, "") + "\n" : "";
    if (config.textContent !== text) config.textContent = text;
    configSection.hidden = !text;
  }

  killButton.addEventListener("click", async () => {
    killButton.disabled = true;
    await kill(task, message);
    changed();
  });
  const changed = coalesced(refresh);
  const unwatch = watch("/cluster/stream", changed);
  const stop = poll(changed, FALLBACK_POLL_MS);
  return () => { unwatch(); stop(); logs.stop(); };
}

// How often a launch asks whether its task answers yet.
const READY_POLL_MS = 1000;

// Launches a notebook or TensorBoard (`body`: POST /api/v1/tasks's) and opens
// its server in a new tab once it answers, saying how it goes on `status`.
// The tab is opened now, in the click (one opened later is blocked as a
// popup), and waits blank; it gets neither a way back to this page (opener)
// nor a copy of this tab's session (the login token): what it shows next is
// the task's. The waiting ends when the tab is closed (or, without a tab, when
// `signal` aborts: the page was left).
export async function launchAndOpen(body, status, signal) {
  const tab = window.open("", "_blank");
  const kind = kindName(body.taskType);
  const show = (...parts) => status.replaceChildren(...parts);
  try {
    if (tab) {
      tab.opener = null;
      tab.sessionStorage.clear();
      tab.document.title = kind;
      tab.document.body.textContent = `Starting ${kind}…`;
    }
    const { task, warnings } = await post("/tasks", body);
    const page = el("a", { href: `#/tasks/${encodeURIComponent(task.id)}` }, `${kind} ${task.id.slice(0, 8)}`);
    show(page, " is starting…", ...warnings.map((w) => el("span.empty", {}, ` (${w})`)));
    const ready = await untilReady(task.id, () => (tab ? tab.closed : signal.aborted));
    if (!ready) return;
    show(page, " is ready: ", openLink(ready));
    if (tab && !tab.closed) tab.location.replace(proxyPath(ready.id));
  } catch (error) {
    if (tab) tab.close();
    show(errorBox(error));
  }
}

// The task once its server answers; null when `givenUp()` first. Throws when
// it ends before answering, saying how it ended.
async function untilReady(taskId, givenUp) {
  for (;;) {
    const { task } = await get(`/tasks/${encodeURIComponent(taskId)}`);
    if (openable(task)) return task;
    if (ended(task)) {
      throw new Error(`${kindName(task.taskType)} ${taskId.slice(0, 8)} ended before it answered: ${exitSummary(task) || "no exit"}`);
    }
    if (givenUp()) return null;
    await new Promise((resolve) => setTimeout(resolve, READY_POLL_MS));
  }
}
