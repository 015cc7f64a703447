// A log view, the trial page's and a task's: the lines of a follow stream
// (`/trials/<id>/logs?follow=true`, `/tasks/<id>/logs?follow=true`) as they
// come, a search that hides the lines without it, and "Follow" keeping the
// newest line in sight. The stream ends with the logs (then data-ended="true").
import { stream } from "./api.js";
import { el, setText } from "./util.js";

const MAX_LOG_LINES = 20000;

// Returns the view's parts to place (`toolbar`, `logs`, the box of lines with
// id `logsId`) and `stop`, which ends the stream.
export function logView(path, logsId) {
  const search = el("input#log-search", { type: "search", placeholder: "Search the logs" });
  const follow = el("input#log-follow", { type: "checkbox", checked: true });
  const count = el("span#log-count");
  const logs = el(`div#${logsId}.logs`);
  const toolbar = el("div.toolbar", {}, search, el("label", {}, follow, " Follow"), count);
  const aborter = new AbortController();

  const matches = (line) => !search.value || line.textContent.toLowerCase().includes(search.value.toLowerCase());
  function countLines() {
    const shown = logs.querySelectorAll("div.log-line:not([hidden])").length;
    setText(count, search.value ? `${shown} of ${logs.childElementCount} lines` : `${logs.childElementCount} lines`);
  }
  function addLines(results) {
    const atBottom = logs.scrollTop + logs.clientHeight >= logs.scrollHeight - 20;
    const fragment = document.createDocumentFragment();
    for (const result of results) {
      const text = result.log ?? result.message;  // a trial's line has its text in `log`
      if (text.includes("\r")) continue;  // progress bars redraw themselves
      const rank = result.rankId ?? null;
      const line = el("div.log-line", { "data-rank": rank },
        el("span.time", {}, result.timestamp ? new Date(result.timestamp).toLocaleTimeString() : ""),
        rank !== null ? el("span.rank", {}, `[rank=${rank}]`) : null,
        el("span.text", {}, text.replace(/\n$/, "")));
      if (result.stdtype === "stderr") line.classList.add("stderr");
      line.hidden = !matches(line);
      fragment.append(line);
    }
    logs.append(fragment);
    while (logs.childElementCount > MAX_LOG_LINES) logs.firstChild.remove();
    if (follow.checked && atBottom) logs.scrollTop = logs.scrollHeight;
    countLines();
  }

  stream(path, aborter.signal, addLines)
    .then(() => { logs.dataset.ended = "true"; })
    .catch((error) => { if (!aborter.signal.aborted) logs.append(el("div.log-error.error", {}, `Logs: ${error.message}`)); });
  search.addEventListener("input", () => {
    for (const line of logs.querySelectorAll("div.log-line")) line.hidden = !matches(line);
    countLines();
  });
  follow.addEventListener("change", () => { if (follow.checked) logs.scrollTop = logs.scrollHeight; });
  return { toolbar, logs, stop: () => aborter.abort() };
}
