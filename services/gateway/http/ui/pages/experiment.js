// #/experiments/<id>: overview, trials, learning curves of every trial for a
// chosen metric (training and validation), hyperparameter plots, checkpoints
// (best first) and the config as YAML; fetched again when the server says the
// experiment or one of its trials changed, else every 30 s. "Open TensorBoard"
// launches one over all its trials and opens it once it answers. The History
// tab (#/experiments/<id>/history) shows its events; each trial's "Why?" its
// causation chain (history.js).
import { get, post, watch } from "../api.js";
import { color, lineChart, parallelCoordinates, scatterPlot } from "../charts.js";
import {
  bytes, coalesced, duration, el, errorBox, FALLBACK_POLL_MS, latestMetric, metricNames, number, poll, progressBar,
  setProgress, setText, stateName, syncRows, toYaml, when,
} from "../util.js";
import { canTransition, EXPERIMENT_TRANSITIONS, TERMINAL_STATES } from "../states.js";
import { launchAndOpen } from "./tasks.js";
import { explain, historyTab, whyQuestion } from "./history.js";

export function experimentPage(view, id, tab = "") {
  const state = el("span#experiment-state.state");
  const progress = progressBar(0);
  const title = el("h1", {}, `Experiment ${id}`);
  const facts = el("dl.facts");
  const message = el("div.message");
  const act = (action) => async () => {
    try { await post(`/experiments/${id}/${action}`); } catch (error) { message.replaceChildren(errorBox(error)); }
    refresh();
  };
  const pause = el("button#experiment-pause", { type: "button", onclick: act("pause") }, "Pause");
  const activate = el("button#experiment-activate", { type: "button", onclick: act("activate") }, "Activate");
  const kill = el("button#experiment-kill.kill", { type: "button", onclick: act("kill") }, "Kill");
  const left = new AbortController();
  const tensorboardStatus = el("div#tensorboard-status");
  const tensorboard = el("button#experiment-tensorboard", {
    type: "button",
    onclick: async () => {
      tensorboard.disabled = true;
      await launchAndOpen({ taskType: "TENSORBOARD", experimentIds: [Number(id)] }, tensorboardStatus, left.signal);
      tensorboard.disabled = false;
    },
  }, "Open TensorBoard");
  const metricSelect = el("select#metric-select");
  const curves = el("div#learning-curves.chart");
  const parallel = el("div#hp-parallel");
  const scatter = el("div#hp-scatter.scatters");
  const trialsBody = el("tbody");
  const trialsHead = el("tr");
  const checkpointsBody = el("tbody");
  const yaml = el("pre#config-yaml");
  const trialExplained = el("div#trial-explain.explain", { hidden: true });
  const overview = el("div#experiment-overview", {},
    facts,
    el("h2", {}, "Trials"),
    el("table#trials-table", {}, el("thead", {}, trialsHead), trialsBody),
    trialExplained,
    el("h2", {}, "Learning curves ", metricSelect),
    curves,
    el("h2", {}, "Hyperparameters"),
    el("h3", {}, "Parallel coordinates"), parallel,
    el("h3", {}, "Metric against each hyperparameter"), scatter,
    el("h2", {}, "Checkpoints (best first)"),
    el("table#checkpoints-table", {}, el("thead", {}, el("tr", {},
      ["UUID", "Trial", "Batches", "Searcher metric", "Size", "State", "Reported"].map((t) => el("th", {}, t)))),
    checkpointsBody),
    el("h2", {}, "Configuration"),
    yaml,
  );
  const history = historyTab(id);
  const tabs = el("div.tabs", {}, el("button#tab-overview", { type: "button", "data-tab": "" }, "Overview"),
    el("button#tab-history", { type: "button", "data-tab": "history" }, "History"));
  view.append(
    el("div.heading", {}, title, state, progress, el("span.spacer"), tensorboard, pause, activate, kill),
    tensorboardStatus,
    message,
    tabs,
    overview,
    history.node,
  );
  const chart = lineChart(curves, { yLabel: "" });
  let experiment = null;
  let config = {};
  let trials = [];
  let drawnKey = "";
  let hpNames = [];
  let finished = false;

  async function refresh() {
    if (finished) return;
    try {
      const [answer, trialList] = await Promise.all([get(`/experiments/${id}`), get(`/experiments/${id}/trials`)]);
      experiment = answer.experiment;
      config = answer.config;
      trials = trialList.trials.sort((a, b) => a.id - b.id);
      message.replaceChildren();
      showOverview();
      showMetricChoices();
      showTrials();
      await Promise.all([showCurves(), showCheckpoints()]);
      // A finished experiment changes no more (but for a deletion): one last refresh drew it.
      const name = stateName(experiment.state);
      finished = TERMINAL_STATES.has(name) || EXPERIMENT_TRANSITIONS[name]?.length === 0;
    } catch (error) {
      message.replaceChildren(errorBox(error));
    }
  }

  function showOverview() {
    const name = stateName(experiment.state);
    setText(title, `Experiment ${id} · ${experiment.name}`);
    setText(state, name);
    state.dataset.state = name;
    setProgress(progress, name === "COMPLETED" ? 1 : experiment.progress);
    pause.disabled = !canTransition(EXPERIMENT_TRANSITIONS, name, "PAUSED");
    activate.disabled = !canTransition(EXPERIMENT_TRANSITIONS, name, "ACTIVE");
    kill.disabled = !canTransition(EXPERIMENT_TRANSITIONS, name, "STOPPING_KILLED");
    const rows = [
      ["Description", experiment.description], ["Owner", experiment.username],
      ["Runs", experiment.unmanaged ? "detached: a script outside the cluster reports (core_v2)" : ""],
      ["Searcher", `${experiment.searcherType} (${experiment.searcherMetric})`],
      ["Best metric", number(experiment.bestTrialSearcherMetric)], ["Trials", experiment.numTrials],
      ["Resource pool", experiment.resourcePool], ["Started", when(experiment.startTime)],
      ["Duration", duration(experiment.startTime, experiment.endTime)], ["End reason", experiment.endReason],
    ].filter(([, value]) => value !== "" && value !== null && value !== undefined);
    facts.replaceChildren(...rows.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
    const text = toYaml(config).replace(/^\n/, "") + "\n";
    if (yaml.textContent !== text) yaml.textContent = text;
  }

  function showMetricChoices() {
    const names = [...metricNames(trials).keys()].sort();
    const searcher = experiment.searcherMetric;
    const current = metricSelect.value || (names.includes(searcher) ? searcher : names[0] || "");
    const shown = [...metricSelect.options].map((o) => o.value);
    if (JSON.stringify(shown) !== JSON.stringify(names)) {
      metricSelect.replaceChildren(...names.map((n) => el("option", { value: n }, n)));
    }
    metricSelect.value = current;
  }

  function showTrials() {
    hpNames = [...new Set(trials.flatMap((t) => Object.keys(flatHparams(t.hparams))))].sort();
    const metric = metricSelect.value;
    const groups = [...(metricNames(trials).get(metric) || [])].sort();  // training, validation: those that have it
    const titles = ["ID", "State", "Batches", ...hpNames, ...groups.map((g) => `${g} ${metric}`),
      `Best ${experiment.searcherMetric}`, "Checkpoints", "Duration", ""];
    if ([...trialsHead.cells].map((c) => c.textContent).join("|") !== titles.join("|")) {
      trialsHead.replaceChildren(...titles.map((t) => el("th", {}, t)));
      trialsBody.replaceChildren();
    }
    syncRows(trialsBody, trials, (t) => t.id,
      (t) => el("tr", { "data-trial-id": t.id }, el("td", {}, el("a", { href: `#/trials/${t.id}` }, t.id)),
        titles.slice(1, -1).map(() => el("td")),
        el("td", {}, el("button.why", { type: "button", onclick: () => explainTrial(t.id) }, "Why?"))),
      (row, t) => {
        const hps = flatHparams(t.hparams);
        const values = [stateName(t.state), t.totalBatchesProcessed, ...hpNames.map((n) => number(hps[n])),
          ...groups.map((g) => number(latestMetric(t, g, metric))), number(t.searcherMetricValue),
          t.totalCheckpoints, duration(t.startTime, t.endTime)];
        values.forEach((v, i) => setText(row.cells[i + 1], v));
        row.cells[1].className = "state";
        row.querySelector("button.why").title = whyQuestion(stateName(t.state));
      });
  }

  // A trial's causation chain and outcome, under the trials table.
  function explainTrial(trialId) {
    trialExplained.hidden = false;
    const answer = el("div");
    trialExplained.replaceChildren(el("div.toolbar", {}, el("h3", {}, `Trial ${trialId}`), el("span.spacer"),
      el("button", { type: "button", onclick: () => { trialExplained.hidden = true; } }, "Close")), answer);
    explain(answer, "trial", trialId);
  }

  // Shows the Overview ("") or History tab, and says which in the address (without a new page).
  function showTab(name) {
    overview.hidden = name === "history";
    history.node.hidden = name !== "history";
    for (const button of tabs.children) button.classList.toggle("active", button.dataset.tab === name);
    window.history.replaceState(null, "", `#/experiments/${id}${name ? `/${name}` : ""}`);
    if (name === "history") history.refresh();
    else window.dispatchEvent(new Event("resize"));  // charts drawn while hidden take the width again
  }

  async function showCurves() {
    const metric = metricSelect.value;
    const groups = metricNames(trials).get(metric) || new Set();
    const key = JSON.stringify([metric, trials.map((t) => [t.id, t.totalBatchesProcessed,
      t.latestTraining && t.latestTraining.totalBatches, t.latestValidation && t.latestValidation.totalBatches])]);
    if (key === drawnKey) return;
    const wanted = trials.flatMap((t, i) => [...groups].sort().map((group) => ({ trial: t, index: i, group })));
    const series = await Promise.all(wanted.map(async ({ trial, index, group }) => {
      const params = new URLSearchParams({ group, metric, max_points: 1000 });
      const points = await get(`/trials/${trial.id}/metrics?${params}`);
      return {
        label: `trial ${trial.id} ${group}`, steps: points.steps, values: points.values,
        color: color(index), dash: group === "validation" ? [6, 4] : undefined,
      };
    }));
    if (metric !== metricSelect.value) return;  // the choice changed meanwhile
    chart.update(series);
    drawnKey = key;
    showHyperparameters(metric, groups);
  }

  function showHyperparameters(metric, groups) {
    const group = groups.has("validation") ? "validation" : "training";
    const rows = trials
      .map((t) => ({ trialId: t.id, hps: flatHparams(t.hparams), metric: latestMetric(t, group, metric) }))
      .filter((r) => r.metric !== null);
    const varying = hpNames.filter((n) => new Set(rows.map((r) => JSON.stringify(r.hps[n]))).size > 1);
    const axes = varying.length ? varying : hpNames;
    if (!rows.length || !axes.length) {
      parallel.replaceChildren(el("p.empty", {}, "No hyperparameters or metrics to plot yet."));
      scatter.replaceChildren();
      return;
    }
    const smallerIsBetter = !(config.searcher && config.searcher.smaller_is_better === false);
    parallelCoordinates(parallel, axes, metric, rows, smallerIsBetter);
    scatter.replaceChildren();
    for (const name of axes) {
      scatterPlot(scatter, name, metric, rows.filter((r) => r.hps[name] !== undefined).map((r) => ({ hp: r.hps[name], metric: r.metric })));
    }
  }

  async function showCheckpoints() {
    const smallerIsBetter = !(config.searcher && config.searcher.smaller_is_better === false);
    const order = smallerIsBetter ? "ORDER_BY_ASC" : "ORDER_BY_DESC";
    const { checkpoints } = await get(`/experiments/${id}/checkpoints?sortByAttr=SORT_BY_SEARCHER_METRIC&orderBy=${order}`);
    syncRows(checkpointsBody, checkpoints, (c) => c.uuid,
      (c) => el("tr", { "data-checkpoint-uuid": c.uuid }, el("td.uuid", {}, c.uuid),
        el("td", {}, el("a", { href: `#/trials/${c.training.trialId}` }, c.training.trialId)), el("td"), el("td"),
        el("td"), el("td"), el("td")),
      (row, c) => {
        [c.metadata.steps_completed, number(c.training.searcherMetric), bytes(c.sizeBytes), stateName(c.state),
          when(c.reportTime)].forEach((v, i) => setText(row.cells[i + 2], v));
      });
  }

  metricSelect.addEventListener("change", () => { drawnKey = ""; showTrials(); showCurves(); });
  for (const button of tabs.children) button.addEventListener("click", () => showTab(button.dataset.tab));
  showTab(tab);
  const changed = coalesced(refresh);
  const onChange = () => {
    changed();
    if (!history.node.hidden) history.refresh();
  };
  const unwatch = watch(`/experiments/${id}/stream`, onChange);
  const stop = poll(onChange, FALLBACK_POLL_MS);
  return () => { unwatch(); stop(); left.abort(); chart.destroy(); };
}

// Nested hyperparameters as dotted names ({optimizer: {lr: 1}} -> {"optimizer.lr": 1}).
function flatHparams(hparams, prefix = "", into = {}) {
  for (const [name, value] of Object.entries(hparams || {})) {
    if (value && typeof value === "object" && !Array.isArray(value)) flatHparams(value, `${prefix}${name}.`, into);
    else into[prefix + name] = value;
  }
  return into;
}
