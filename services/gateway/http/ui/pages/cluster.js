// #/cluster: agents, their slots and what runs on each, and the job queue with
// why each job waits; fetched again when the server says they changed, else every 30 s.
import { get, watch } from "../api.js";
import { coalesced, el, errorBox, FALLBACK_POLL_MS, poll, setText, stateName, syncRows, when } from "../util.js";

function table(id, titles) {
  const body = el("tbody");
  return [el(`table#${id}`, {}, el("thead", {}, el("tr", {}, titles.map((t) => el("th", {}, t)))), body), body];
}

export function clusterPage(view) {
  const message = el("div.message");
  const summary = el("p#cluster-summary");
  const [agents, agentRows] = table("agents-table", ["Agent", "Host", "State", "Resource pool", "Slots", "In use", "Registered"]);
  const [slots, slotRows] = table("slots-table", ["Agent", "Slot", "Device", "Enabled", "Running"]);
  const [jobs, jobRows] = table("jobs-table", ["#", "Job", "Type", "Owner", "State", "Slots", "Pool", "Submitted", "Why it waits"]);
  view.append(el("h1", {}, "Cluster"), summary, message,
    el("h2", {}, "Agents"), agents, el("h2", {}, "Slots"), slots, el("h2", {}, "Job queue"), jobs);

  async function refresh() {
    try {
      const [agentList, queue] = await Promise.all([get("/agents"), get("/job-queues")]);
      message.replaceChildren();
      show(agentList.agents, queue.jobs);
    } catch (error) {
      message.replaceChildren(errorBox(error));
    }
  }

  function show(agentList, jobList) {
    const allSlots = agentList.flatMap((a) => Object.values(a.slots).map((s) => ({ agent: a, slot: s })));
    const busy = allSlots.filter(({ slot }) => slot.container).length;
    setText(summary, `${agentList.length} agent(s), ${busy} of ${allSlots.length} slot(s) in use, ${jobList.length} job(s).`);
    syncRows(agentRows, agentList, (a) => a.id,
      (a) => el("tr", { "data-agent-id": a.id }, Array.from({ length: 7 }, () => el("td"))),
      (row, a) => {
        const own = Object.values(a.slots);
        [a.id, a.hostname, stateName(a.state), a.resourcePools.join(", "), own.length,
          own.filter((s) => s.container).length, when(a.registeredTime)].forEach((v, i) => setText(row.cells[i], v));
      });
    syncRows(slotRows, allSlots, ({ agent, slot }) => `${agent.id}/${slot.id}`,
      ({ agent, slot }) => el("tr", { "data-agent-id": agent.id, "data-slot-id": slot.id },
        Array.from({ length: 5 }, () => el("td"))),
      (row, { agent, slot }) => {
        [agent.id, slot.id, `${slot.device.type.replace(/^TYPE_/, "")} ${slot.device.brand}`.trim(),
          slot.enabled ? (slot.draining ? "draining" : "yes") : "no"].forEach((v, i) => setText(row.cells[i], v));
        const running = slot.trialId
          ? el("a", { href: `#/trials/${slot.trialId}` }, `trial ${slot.trialId} (experiment ${slot.experimentId})`)
          : slot.container ? slot.container.id : "idle";
        const text = typeof running === "string" ? running : running.textContent;
        if (row.cells[4].textContent !== text) row.cells[4].replaceChildren(running);
      });
    syncRows(jobRows, jobList, (j) => j.jobId,
      (j) => el("tr", { "data-job-id": j.jobId }, Array.from({ length: 9 }, () => el("td"))),
      (row, j) => {
        const state = stateName(j.summary.state);
        [j.summary.jobsAhead, j.name || j.jobId, j.type.replace(/^TYPE_/, ""), j.username, state,
          `${j.allocatedSlots}/${j.requestedSlots}`, j.resourcePool, when(j.submissionTime),
          j.waitingReason].forEach((v, i) => setText(row.cells[i], v));
        row.cells[4].className = "state";
      });
  }

  const changed = coalesced(refresh);
  const unwatch = watch("/cluster/stream", changed);
  const stop = poll(changed, FALLBACK_POLL_MS);
  return () => { unwatch(); stop(); };
}
