// The event log as people read it (GET /api/v1/events and
// /api/v1/events/explain/...): an experiment's History tab, its events as a
// timeline (time, who, what, why), newest last, filtered by type; clicking an
// event highlights the event it answers and lists the events that answer it.
// And a trial's "Why did it stop?": its causation chain, indented, and the
// outcome in one line. Everything shown is the gateway's words, redacted there;
// el() puts it in as text.
import { get } from "../api.js";
import { coalesced, el, errorBox, fromNs, setText, when } from "../util.js";
import { TERMINAL_STATES } from "../states.js";

// The most events one fetch asks for: the tab opens on the newest ones.
const PAGE = 1000;
// The type filter's choice that leaves out the many training metric reports.
const NO_METRICS = "!trial_metrics_reported";

// Whether an event of `type` passes the type filter's `choice`.
function passes(choice, type) {
  if (choice === NO_METRICS) return type !== "trial_metrics_reported";
  return !choice || choice === type;
}

// "user:alice" -> {kind: "user", name: "alice"}; "trial:7" -> {kind: "trial", name: "trial 7"}.
export function actorParts(actor) {
  const [kind, ...rest] = (actor || "").split(":");
  const name = rest.join(":");
  if (!name) return { kind: "", name: kind };
  return { kind, name: kind === "user" || kind === "service" ? name : `${kind} ${name}` };
}

function actorCell(actor) {
  const { kind, name } = actorParts(actor);
  return el("span.actor", { "data-kind": kind, title: actor }, name);
}

// "trial_stop_requested" -> "trial stop requested".
export function typeWords(type) {
  return (type || "").replace(/_/g, " ");
}

// Numbers of the JSON form (int64 fields come as strings, defaults not at all).
function sequenceOf(event) {
  return Number(event.sequence || 0);
}

function reference(event, onclick) {
  return el("a.event-link", { href: "#", "data-sequence": sequenceOf(event), onclick },
    `#${sequenceOf(event)} `, el("span.type", {}, typeWords(event.type)), ` ${event.summary || ""}`);
}

// The History tab of experiment `experimentId`: `node` to show, `refresh()`
// to read what was appended since (the first call reads the newest PAGE; one
// call at a time).
export function historyTab(experimentId) {
  const typeSelect = el("select#history-type", {}, el("option", { value: "" }, "All types"));
  const status = el("span#history-status.empty");
  const earlierButton = el("button#history-earlier", { type: "button", hidden: true, onclick: () => earlier() },
    `Show ${PAGE} earlier events`);
  const message = el("div.message");
  const tbody = el("tbody");
  const node = el("div#experiment-history",
    {},
    el("div.toolbar", {}, typeSelect, status, earlierButton),
    message,
    el("table#history-table", {}, el("thead", {}, el("tr", {},
      ["Time", "#", "Who", "What", "Why"].map((t) => el("th", {}, t)))), tbody),
  );
  const bySequence = new Map();
  const byId = new Map();  // event id -> event
  const answers = new Map();  // event id -> the events whose cause it is
  const counts = new Map();  // type -> how many
  let last = 0;  // the newest sequence read
  let oldest = null;  // the oldest event read
  let selected = null;

  async function refresh() {
    try {
      for (;;) {
        const first = !last;
        const params = new URLSearchParams({ experimentId, limit: PAGE });
        if (first) params.set("tail", "true");
        else params.set("fromSeq", last + 1);
        const { events = [] } = await get(`/events?${params}`);
        if (first) earlierButton.hidden = events.length < PAGE;
        events.forEach((event) => add(event, false));
        if (first || events.length < PAGE) break;
      }
      shown();
    } catch (error) {
      message.replaceChildren(errorBox(error));
    }
  }

  // The PAGE events before the oldest shown (by time: the filter has no sequence bound).
  async function earlier() {
    earlierButton.disabled = true;
    try {
      const until = (BigInt(oldest.occurredAtNs) - 1n).toString();
      const params = new URLSearchParams({ experimentId, until, tail: "true", limit: PAGE });
      const { events = [] } = await get(`/events?${params}`);
      events.reverse().forEach((event) => add(event, true));
      earlierButton.hidden = events.length < PAGE;
      shown();
    } catch (error) {
      message.replaceChildren(errorBox(error));
    } finally {
      earlierButton.disabled = false;
    }
  }

  function shown() {
    message.replaceChildren();
    showTypes();
    setText(status, `${bySequence.size} events`);
  }

  // Shows `event` last, or first when `before` (an earlier page, read newest first).
  function add(event, before) {
    const sequence = sequenceOf(event);
    if (bySequence.has(sequence)) return;
    last = Math.max(last, sequence);
    bySequence.set(sequence, event);
    byId.set(event.eventId, event);
    if (event.causationId) {
      if (!answers.has(event.causationId)) answers.set(event.causationId, []);
      answers.get(event.causationId).push(event);
    }
    counts.set(event.type, (counts.get(event.type) || 0) + 1);
    if (before || !oldest) oldest = event;
    if (before) tbody.prepend(row(event));
    else tbody.append(row(event));
  }

  function row(event) {
    const cause = byId.get(event.causationId);
    const what = el("td.summary", {}, el("span.type", {}, typeWords(event.type)), " ", event.summary || "");
    if (cause) what.append(" ", el("span.cause-ref", { title: "the event it answers" }, `↳ #${sequenceOf(cause)}`));
    const tr = el("tr.event", {
      "data-sequence": sequenceOf(event), "data-type": event.type, title: event.aggregate, onclick: () => select(event),
    },
    el("td.time", {}, when(fromNs(event.occurredAtNs))),
    el("td.sequence", {}, sequenceOf(event)),
    el("td.actor", {}, actorCell(event.actor)),
    what,
    el("td.reason", {}, event.reason || ""));
    tr.hidden = !passes(typeSelect.value, event.type);
    return tr;
  }

  function rowOf(event) {
    return event && tbody.querySelector(`tr.event[data-sequence="${sequenceOf(event)}"]`);
  }

  function showTypes() {
    const chosen = typeSelect.value;
    const types = [...counts.keys()].sort();
    const metrics = counts.get("trial_metrics_reported") || 0;
    typeSelect.replaceChildren(el("option", { value: "" }, `All types (${bySequence.size})`),
      el("option", { value: NO_METRICS }, `All but training metrics (${bySequence.size - metrics})`),
      ...types.map((t) => el("option", { value: t }, `${typeWords(t)} (${counts.get(t)})`)));
    typeSelect.value = chosen;
  }

  function filter() {
    for (const tr of tbody.querySelectorAll("tr.event")) {
      tr.hidden = !passes(typeSelect.value, tr.dataset.type);
    }
  }

  // Highlights `event`, the event it answers (scrolled to) and those that answer it;
  // the details go in a row under it.
  function select(event) {
    for (const tr of tbody.querySelectorAll("tr.selected, tr.cause, tr.consequence")) {
      tr.classList.remove("selected", "cause", "consequence");
    }
    tbody.querySelector("tr.event-detail")?.remove();
    if (selected === event) { selected = null; return; }
    selected = event;
    const tr = rowOf(event);
    const cause = byId.get(event.causationId);
    const led = [...(answers.get(event.eventId) || [])].sort((a, b) => sequenceOf(a) - sequenceOf(b));
    if ((cause && rowOf(cause).hidden) || tr.hidden) { typeSelect.value = ""; filter(); }
    tr.classList.add("selected");
    led.forEach((e) => rowOf(e).classList.add("consequence"));
    tr.after(el("tr.event-detail", {}, el("td", { colspan: 5 }, details(event, cause, led))));
    if (cause) {
      const causeRow = rowOf(cause);
      causeRow.classList.add("cause");
      causeRow.scrollIntoView({ block: "nearest" });
    }
  }

  function details(event, cause, led) {
    const go = (target) => (click) => { click.preventDefault(); click.stopPropagation(); select(target); };
    let answered = "a user's or a process's own act (it answers no event)";
    if (cause) answered = reference(cause, go(cause));
    else if (event.causationId) answered = `${event.causationId} (not among this experiment's events)`;
    return el("dl.facts.event-facts", {},
      el("dt", {}, "Answers"), el("dd.answers", {}, answered),
      el("dt", {}, "Led to"), el("dd.led-to", {}, led.length
        ? el("ul", {}, led.map((e) => el("li", {}, reference(e, go(e))))) : "nothing yet among this experiment's events"),
      el("dt", {}, "Event"), el("dd", {}, `${event.eventId} on ${event.aggregate}, by ${event.actor}`),
      el("dt", {}, "Payload"), el("dd", {}, el("pre.payload", {}, pretty(event.payloadJson))));
  }

  typeSelect.addEventListener("change", filter);
  return { node, refresh: coalesced(refresh) };
}

function pretty(json) {
  try { return JSON.stringify(JSON.parse(json || "{}"), null, 2); } catch { return json; }
}

// Fills `container` with why `kind` `id` ("trial", 7) is where it is: the
// outcome in one line, then its causation chain indented by depth.
export async function explain(container, kind, id) {
  container.replaceChildren(el("p.empty", {}, "Reading its events…"));
  try {
    const { chain = [], outcome = "" } = await get(`/events/explain/${kind}/${encodeURIComponent(id)}`);
    container.replaceChildren(
      el("p.outcome", {}, el("strong", {}, "Outcome: "), outcome),
      el("ol.chain", {}, chain.map(({ event, depth = 0 }) => {
        const item = el("li.explained", { "data-depth": depth, "data-type": event.type },
          el("span.time", {}, when(fromNs(event.occurredAtNs))), " ",
          el("span.type", {}, typeWords(event.type)), " ", actorCell(event.actor), " ",
          el("span.summary", {}, event.summary || ""),
          event.reason ? el("span.reason", {}, ` — ${event.reason}`) : null);
        item.style.paddingLeft = `${depth * 1.5}em`;
        return item;
      })));
  } catch (error) {
    container.replaceChildren(errorBox(error));
  }
}

// The question a trial's explanation answers, as its button says it.
export function whyQuestion(state) {
  const ended = TERMINAL_STATES.has(state) || state === "PAUSED" || state.startsWith("STOPPING");
  return ended ? "Why did it stop?" : `Why is it ${state.toLowerCase().replace(/_/g, " ")}?`;
}
