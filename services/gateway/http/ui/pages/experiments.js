// #/experiments: every experiment, filtered, sorted and paged by the server,
// fetched again when the server says one changed (its stream), else every 30 s;
// kill/pause/activate per row.
import { get, post, watch } from "../api.js";
import {
  coalesced, duration, el, errorBox, FALLBACK_POLL_MS, number, poll, progressBar, setProgress, setText, stateName,
  syncRows, when,
} from "../util.js";
import { canTransition, EXPERIMENT_DELETION_STATES, EXPERIMENT_STATES, EXPERIMENT_TRANSITIONS } from "../states.js";

// Deleted experiments are not listed; one being deleted shows under "All states". Archived
// ones (det experiment archive) only with "Show archived", as det experiment list --all.
const STATES = EXPERIMENT_STATES.filter((s) => !EXPERIMENT_DELETION_STATES.has(s));
const COLUMNS = [  // [title, sortBy or null]
  ["ID", "SORT_BY_ID"], ["Name", "SORT_BY_NAME"], ["Owner", "SORT_BY_USER"], ["State", "SORT_BY_STATE"],
  ["Progress", "SORT_BY_PROGRESS"], ["Searcher", null], ["Searcher metric", null],
  ["Best", "SORT_BY_BEST_TRIAL_SEARCHER_METRIC"], ["Trials", "SORT_BY_NUM_TRIALS"],
  ["Started", "SORT_BY_START_TIME"], ["Duration", null], ["", null],
];
const PAGE_SIZES = [20, 50, 100, 1000];

export function experimentsPage(view) {
  const query = { sortBy: "SORT_BY_ID", orderBy: "ORDER_BY_DESC", offset: 0, limit: 50 };
  const stateFilter = el("select#filter-state", {}, el("option", { value: "" }, "All states"),
    STATES.map((s) => el("option", { value: s }, s)));
  const nameFilter = el("input#filter-name", { type: "search", placeholder: "Name contains" });
  const ownerFilter = el("input#filter-owner", { type: "search", placeholder: "Owner" });
  const showArchived = el("input#filter-archived", { type: "checkbox" });
  const pageSize = el("select#page-size", {}, PAGE_SIZES.map((n) => el("option", { value: n, selected: n === query.limit }, `${n} per page`)));
  const pageInfo = el("span#page-info");
  const previous = el("button#page-previous", { type: "button" }, "‹ Previous");
  const next = el("button#page-next", { type: "button" }, "Next ›");
  const message = el("div.message");
  const header = el("tr", {}, COLUMNS.map(([title, sortBy]) => el("th", {
    "data-sort": sortBy,
    class: sortBy ? "sortable" : null,
    onclick: sortBy ? () => sortOn(sortBy) : null,
  }, title)));
  const tbody = el("tbody");
  const table = el("table#experiments-table", {}, el("thead", {}, header), tbody);
  view.append(
    el("h1", {}, "Experiments"),
    el("div.toolbar", {}, stateFilter, nameFilter, ownerFilter, el("label", {}, showArchived, " Show archived"),
      el("span.spacer"), pageSize, previous, pageInfo, next),
    message,
    table,
  );

  let asked = 0;
  async function refresh() {
    const ticket = ++asked;
    const params = new URLSearchParams(Object.entries(query));
    if (stateFilter.value) params.set("states", "STATE_" + stateFilter.value);
    if (nameFilter.value.trim()) params.set("name", nameFilter.value.trim());
    if (ownerFilter.value.trim()) params.set("users", ownerFilter.value.trim());
    if (!showArchived.checked) params.set("archived", "false");
    try {
      const answer = await get("/experiments?" + params);
      if (ticket !== asked) return;  // a newer request is on its way
      message.replaceChildren();
      show(answer);
    } catch (error) {
      message.replaceChildren(errorBox(error));
    }
  }
  const refreshNow = () => refresh();

  function show({ experiments, pagination }) {
    syncRows(tbody, experiments, (e) => e.id, createRow, updateRow);
    const total = pagination.total;
    const first = total ? pagination.startIndex + 1 : 0;
    setText(pageInfo, `${first}–${pagination.endIndex} of ${total}`);
    previous.disabled = query.offset === 0;
    next.disabled = pagination.endIndex >= total;
    for (const th of header.cells) {
      th.classList.toggle("sorted", th.dataset.sort === query.sortBy);
      th.classList.toggle("descending", th.dataset.sort === query.sortBy && query.orderBy === "ORDER_BY_DESC");
    }
    if (!experiments.length) message.replaceChildren(el("p.empty", {}, "No experiments match."));
  }

  function createRow(experiment) {
    const id = experiment.id;
    const act = (action) => async (event) => {
      event.target.disabled = true;
      try { await post(`/experiments/${id}/${action}`); } catch (error) { message.replaceChildren(errorBox(error)); }
      refreshNow();
    };
    return el("tr", { "data-experiment-id": id },
      el("td", {}, el("a", { href: `#/experiments/${id}` }, id)),
      el("td.name", {}, el("a", { href: `#/experiments/${id}` }),
        el("span.detached", { hidden: true, title: "a detached run: a script outside the cluster (core_v2)" }, "detached")),
      el("td.owner"), el("td.state"), el("td", {}, progressBar(0)), el("td.searcher"), el("td.metric"),
      el("td.best"), el("td.trials"), el("td.started"), el("td.duration"),
      el("td.actions", {},
        el("button.pause", { type: "button", onclick: act("pause") }, "Pause"),
        el("button.activate", { type: "button", onclick: act("activate") }, "Activate"),
        el("button.kill", { type: "button", onclick: act("kill") }, "Kill")),
    );
  }

  function updateRow(row, e) {
    const state = stateName(e.state);
    const cells = row.cells;
    setText(cells[1].firstChild, e.name);
    cells[1].lastChild.hidden = !e.unmanaged;
    setText(cells[2], e.username);
    setText(cells[3], state);
    cells[3].dataset.state = state;
    setProgress(cells[4].firstChild, state === "COMPLETED" ? 1 : e.progress);
    setText(cells[5], e.searcherType);
    setText(cells[6], e.searcherMetric);
    setText(cells[7], number(e.bestTrialSearcherMetric));
    setText(cells[8], e.numTrials);
    setText(cells[9], when(e.startTime));
    setText(cells[10], duration(e.startTime, e.endTime));
    const [pause, activate, kill] = cells[11].children;
    pause.disabled = !canTransition(EXPERIMENT_TRANSITIONS, state, "PAUSED");
    activate.disabled = !canTransition(EXPERIMENT_TRANSITIONS, state, "ACTIVE");
    kill.disabled = !canTransition(EXPERIMENT_TRANSITIONS, state, "STOPPING_KILLED");
  }

  function sortOn(sortBy) {
    if (query.sortBy === sortBy) query.orderBy = query.orderBy === "ORDER_BY_DESC" ? "ORDER_BY_ASC" : "ORDER_BY_DESC";
    else Object.assign(query, { sortBy, orderBy: "ORDER_BY_ASC" });
    refreshNow();
  }
  const refilter = () => { query.offset = 0; refreshNow(); };
  stateFilter.addEventListener("change", refilter);
  nameFilter.addEventListener("input", refilter);
  ownerFilter.addEventListener("input", refilter);
  showArchived.addEventListener("change", refilter);
  pageSize.addEventListener("change", () => { query.limit = Number(pageSize.value); refilter(); });
  previous.addEventListener("click", () => { query.offset = Math.max(0, query.offset - query.limit); refreshNow(); });
  next.addEventListener("click", () => { query.offset += query.limit; refreshNow(); });

  // The first rows drawn, and the main thread free again after them (bench/webui.py reads these).
  const first = refreshNow().then(() => {
    performance.mark("experiments:rendered");
    requestAnimationFrame(() => setTimeout(() => {
      performance.mark("experiments:interactive");
      table.dataset.loaded = "true";
    }));
  });
  const changed = coalesced(refresh);
  const unwatch = watch("/experiments/stream", changed);
  let stop = () => {};
  first.then(() => { if (stop) stop = poll(changed, FALLBACK_POLL_MS, false); });
  return () => { unwatch(); stop(); stop = null; };
}
