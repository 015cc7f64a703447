// Small DOM and formatting helpers shared by the pages.

// el("td.state", {title: "x"}, "text", child, ...): an element with classes,
// attributes (on* are listeners) and children (strings become text).
export function el(spec, attributes = {}, ...children) {
  const [tag, ...classes] = spec.split(".");
  const [name, id] = tag.split("#");
  const node = document.createElement(name || "div");
  if (id) node.id = id;
  if (classes.length) node.className = classes.join(" ");
  for (const [key, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "text") node.textContent = value;
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

// Sets a node's text only when it changed (keeps selections and the DOM still).
export function setText(node, text) {
  const value = text === null || text === undefined ? "" : String(text);
  if (node.textContent !== value) node.textContent = value;
}

// Runs `refresh` now and every `periodMs` after the previous one finished,
// skipping while the tab is hidden (`immediate` false: the first run waits a
// period too); returns a stop function.
export function poll(refresh, periodMs = 2000, immediate = true) {
  let stopped = false;
  let timer = null;
  const tick = async () => {
    if (stopped) return;
    if (!document.hidden) {
      try { await refresh(); } catch (error) { console.warn(error); }
    }
    if (!stopped) timer = setTimeout(tick, periodMs);
  };
  if (immediate) tick();
  else timer = setTimeout(tick, periodMs);
  return () => { stopped = true; clearTimeout(timer); };
}

// How often a live page asks again when no notice came (its stream may be down).
export const FALLBACK_POLL_MS = 30000;

// `refresh` that runs once at a time: a call while it runs makes it run once
// more afterwards (so the last change is always fetched), however many calls came.
export function coalesced(refresh) {
  let running = null;
  let again = false;
  const run = async () => {
    if (running) { again = true; return running; }
    running = (async () => {
      try {
        do { again = false; await refresh(); } while (again);
      } finally {
        running = null;
      }
    })();
    return running;
  };
  return run;
}

// Keeps tbody's rows in the order of `items`, one per key: `create(item)` makes
// a row once, `update(row, item)` refreshes it; rows of vanished keys go.
export function syncRows(tbody, items, key, create, update) {
  const existing = new Map();
  for (const row of tbody.rows) existing.set(row.dataset.key, row);
  let previous = null;
  for (const item of items) {
    const id = String(key(item));
    let row = existing.get(id);
    if (row) existing.delete(id);
    else { row = create(item); row.dataset.key = id; }
    update(row, item);
    const expected = previous ? previous.nextSibling : tbody.firstChild;
    if (row !== expected) tbody.insertBefore(row, expected);
    previous = row;
  }
  for (const row of existing.values()) row.remove();
}

export function stateName(state) {
  return (state || "").replace(/^STATE_/, "");
}

export function duration(start, end) {
  if (!start) return "";
  const seconds = Math.max(0, ((end ? Date.parse(end) : Date.now()) - Date.parse(start)) / 1000);
  if (seconds < 60) return `${Math.round(seconds)}s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)}m ${Math.round(seconds % 60)}s`;
  return `${Math.floor(seconds / 3600)}h ${Math.floor((seconds % 3600) / 60)}m`;
}

export function when(time) {
  return time ? new Date(time).toLocaleString() : "";
}

// Milliseconds since the epoch of a Unix-nanoseconds int64 (JSON gives it as a
// string, too big for a Number's precision until divided), for when().
export function fromNs(ns) {
  return ns ? Number(BigInt(ns) / 1000000n) : null;
}

export function number(value) {
  if (typeof value !== "number") return value === undefined || value === null ? "" : String(value);
  if (Number.isInteger(value)) return String(value);
  return Math.abs(value) >= 1e4 || Math.abs(value) < 1e-3 ? value.toExponential(3) : value.toPrecision(4);
}

export function bytes(size) {
  if (!size) return "0 B";
  const units = ["B", "KB", "MB", "GB", "TB"];
  const power = Math.min(units.length - 1, Math.floor(Math.log(size) / Math.log(1024)));
  return `${(size / 1024 ** power).toFixed(power ? 1 : 0)} ${units[power]}`;
}

export function progressBar(fraction) {
  const bar = el("div.progress", { title: `${Math.round((fraction || 0) * 100)}%` }, el("span"));
  setProgress(bar, fraction);
  return bar;
}

export function setProgress(bar, fraction) {
  const percent = `${Math.round(Math.min(1, Math.max(0, fraction || 0)) * 100)}%`;
  bar.firstChild.style.width = percent;
  bar.title = percent;
  bar.dataset.value = percent;
}

// A JSON value as YAML (block style; strings quoted only when they must be).
export function toYaml(value, indent = "") {
  if (Array.isArray(value)) {
    if (!value.length) return "[]";
    return value.map((item) => `\n${indent}- ${toYaml(item, indent + "  ").replace(/^\n\s*/, "")}`).join("");
  }
  if (value && typeof value === "object") {
    const keys = Object.keys(value);
    if (!keys.length) return "{}";
    return keys.map((key) => {
      const inner = toYaml(value[key], indent + "  ");
      return `\n${indent}${scalar(key)}:${inner.startsWith("\n") ? "" : " "}${inner}`;
    }).join("");
  }
  return scalar(value);
}

function scalar(value) {
  if (value === null || value === undefined) return "null";
  if (typeof value !== "string") return String(value);
  const plain = /^[A-Za-z_./][\w./ -]*$/.test(value) && !/^(true|false|null|yes|no|on|off|~)$/i.test(value)
    && !value.endsWith(" ") && !value.includes(": ");
  return plain ? value : JSON.stringify(value);
}

// The metric names a trial reported, per group, from its latest metrics.
export function metricNames(trials) {
  const names = new Map();  // name -> Set of groups
  for (const trial of trials) {
    for (const [group, workload] of [["training", trial.latestTraining], ["validation", trial.latestValidation]]) {
      const metrics = workload && workload.metrics && workload.metrics.avgMetrics;
      if (!metrics) continue;
      for (const [name, value] of Object.entries(metrics)) {
        if (typeof value !== "number") continue;
        if (!names.has(name)) names.set(name, new Set());
        names.get(name).add(group);
      }
    }
  }
  return names;
}

export function latestMetric(trial, group, name) {
  const workload = group === "validation" ? trial.latestValidation : trial.latestTraining;
  const value = workload && workload.metrics && workload.metrics.avgMetrics && workload.metrics.avgMetrics[name];
  return typeof value === "number" ? value : null;
}

export function errorBox(error) {
  return el("p.error", {}, String(error.message || error));
}
