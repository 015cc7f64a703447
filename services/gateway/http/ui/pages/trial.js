// #/trials/<id>: state, hyperparameters, a chart of any metric of any group
// (log scale toggle), the logs (live tail over the follow stream, search) and
// the checkpoints; the trial and its chart are fetched again when the server
// says the trial changed, else every 30 s. "Why did it stop?" shows its
// causation chain and outcome (history.js).
import { download, get, watch } from "../api.js";
import { color, lineChart } from "../charts.js";
import {
  bytes, coalesced, duration, el, errorBox, FALLBACK_POLL_MS, metricNames, number, poll, setText, stateName,
  syncRows, when,
} from "../util.js";
import { logView } from "../logs.js";
import { TERMINAL_STATES } from "../states.js";
import { explain, whyQuestion } from "./history.js";

export function trialPage(view, id) {
  const title = el("h1", {}, `Trial ${id}`);
  const state = el("span#trial-state.state");
  const facts = el("dl.facts");
  const hparams = el("tbody");
  const message = el("div.message");
  const groupSelect = el("select#group-select", {}, ["training", "validation"].map((g) => el("option", { value: g }, g)));
  const metricSelect = el("select#trial-metric-select");
  const logScale = el("input#log-scale", { type: "checkbox" });
  const chartBox = el("div#trial-chart.chart");
  const logs = logView(`/trials/${id}/logs?follow=true`, "trial-logs");
  const checkpoints = el("tbody");
  const explained = el("div#trial-explain.explain", { hidden: true });
  const why = el("button#trial-why", {
    type: "button",
    onclick: () => { explained.hidden = false; explain(explained, "trial", id); },
  }, "Why did it stop?");
  view.append(
    el("div.heading", {}, title, state, el("span.spacer"), why, el("a#trial-experiment")),
    message,
    explained,
    facts,
    el("h2", {}, "Hyperparameters"),
    el("table#trial-hparams", {}, el("thead", {}, el("tr", {}, el("th", {}, "Name"), el("th", {}, "Value"))), hparams),
    el("h2", {}, "Metrics"),
    el("div.toolbar", {}, groupSelect, metricSelect, el("label", {}, logScale, " Log scale")),
    chartBox,
    el("h2", {}, "Checkpoints"),
    el("table#trial-checkpoints", {}, el("thead", {}, el("tr", {},
      ["UUID", "Batches", "Searcher metric", "Size", "State", "Reported", "Download"].map((t) => el("th", {}, t)))),
    checkpoints),
    el("h2", {}, "Logs"),
    logs.toolbar,
    logs.logs,
  );
  const chart = lineChart(chartBox, { yLabel: "" });
  let trial = null;
  let runs = [];
  let drawnKey = "";
  let finished = false;

  async function refresh() {
    if (finished) return;
    try {
      const answer = await get(`/trials/${id}`);
      trial = answer.trial;
      runs = answer.runs;
      message.replaceChildren();
      showTrial();
      await Promise.all([showChart(), showCheckpoints()]);
      finished = TERMINAL_STATES.has(stateName(trial.state));
    } catch (error) {
      message.replaceChildren(errorBox(error));
    }
  }

  function showTrial() {
    const name = stateName(trial.state);
    setText(state, name);
    state.dataset.state = name;
    setText(why, whyQuestion(name));
    const link = view.querySelector("#trial-experiment");
    link.href = `#/experiments/${trial.experimentId}`;
    setText(link, `Experiment ${trial.experimentId}`);
    const last = runs[runs.length - 1];
    const rows = [
      ["Batches", trial.totalBatchesProcessed], ["Restarts", trial.restarts], ["Runner", trial.runnerState],
      ["Started", when(trial.startTime)], ["Duration", duration(trial.startTime, trial.endTime)],
      ["Agents", last ? last.agentIds.join(", ") : ""], ["End reason", trial.endReason],
    ].filter(([, value]) => value !== "" && value !== null && value !== undefined);
    facts.replaceChildren(...rows.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
    const entries = Object.entries(trial.hparams).sort(([a], [b]) => a.localeCompare(b));
    syncRows(hparams, entries, ([name]) => name, () => el("tr", {}, el("td"), el("td")), (row, [name, value]) => {
      setText(row.cells[0], name);
      setText(row.cells[1], typeof value === "object" ? JSON.stringify(value) : number(value));
    });
    // Metric choices: the names of the chosen group.
    const names = [...metricNames([trial])].filter(([, groups]) => groups.has(groupSelect.value)).map(([n]) => n).sort();
    const current = names.includes(metricSelect.value) ? metricSelect.value : names.find((n) => n.includes("loss")) || names[0] || "";
    if ([...metricSelect.options].map((o) => o.value).join("|") !== names.join("|")) {
      metricSelect.replaceChildren(...names.map((n) => el("option", { value: n }, n)));
    }
    metricSelect.value = current;
  }

  async function showChart() {
    const group = groupSelect.value;
    const metric = metricSelect.value;
    const latest = group === "validation" ? trial.latestValidation : trial.latestTraining;
    const key = JSON.stringify([group, metric, logScale.checked, latest && latest.totalBatches]);
    if (key === drawnKey) return;
    if (!metric) { chart.update([]); drawnKey = key; return; }
    const params = new URLSearchParams({ group, metric, max_points: 1000 });
    const points = await get(`/trials/${id}/metrics?${params}`);
    if (group !== groupSelect.value || metric !== metricSelect.value) return;
    chart.update([{ label: `${group} ${metric}`, steps: points.steps, values: points.values, color: color(0) }],
      { log: logScale.checked });
    chartBox.dataset.totalPoints = String(points.totalPoints);
    drawnKey = key;
  }

  async function showCheckpoints() {
    const answer = await get(`/trials/${id}/checkpoints?sortByAttr=SORT_BY_BATCH_NUMBER&orderBy=ORDER_BY_DESC`);
    syncRows(checkpoints, answer.checkpoints, (c) => c.uuid,
      (c) => el("tr", { "data-checkpoint-uuid": c.uuid }, el("td.uuid", {}, c.uuid), el("td"), el("td"), el("td"),
        el("td"), el("td"), el("td.download", {}, downloads(c))),
      (row, c) => {
        [c.metadata.steps_completed, number(c.training.searcherMetric), bytes(c.sizeBytes), stateName(c.state),
          when(c.reportTime)].forEach((v, i) => setText(row.cells[i + 1], v));
        row.cells[3].title = Object.entries(c.resources).map(([f, s]) => `${f}: ${bytes(s)}`).join("\n");
      });
  }

  // A checkpoint's files, each a download, and the CLI command for all of them.
  function downloads(c) {
    const files = Object.entries(c.resources).filter(([path]) => !path.endsWith("/")).sort();
    const save = (path) => async (event) => {
      event.preventDefault();
      try { await download(`/checkpoints/${c.uuid}/files/${path.split("/").map(encodeURIComponent).join("/")}`,
        path.split("/").pop()); } catch (error) { message.replaceChildren(errorBox(error)); }
    };
    return el("details", {},
      el("summary", {}, `${files.length} file(s)`),
      files.map(([path, size]) => el("div", {}, el("a.file", { href: "#", onclick: save(path) }, path), ` (${bytes(size)})`)),
      el("code", { title: "the whole checkpoint, with the CLI" }, `det checkpoint download ${c.uuid}`));
  }

  const redraw = () => { drawnKey = ""; if (trial) { showTrial(); showChart(); } };
  groupSelect.addEventListener("change", redraw);
  metricSelect.addEventListener("change", redraw);
  logScale.addEventListener("change", redraw);
  const changed = coalesced(refresh);
  const unwatch = watch(`/trials/${id}/stream`, changed);
  const stop = poll(changed, FALLBACK_POLL_MS);
  return () => { unwatch(); stop(); logs.stop(); chart.destroy(); };
}
