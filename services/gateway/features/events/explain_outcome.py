"""Where a trial, an experiment or an allocation stands, or how it ended, in
one line, from the events an explanation read (pure): "stopped: cut at rung 0
(58 batches): loss 0.81 not in the top 1/4 of 8", "killed by alice",
"running: run 2 on agent-2 since 2026-11-27 12:03:04 UTC".
"""

import datetime
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from determined.common.states import (
    TERMINAL_STATES,
    ExperimentState,
    TrialState,
    experiment_state,
    trial_state,
)
from determined.proto import events_pb2
from services.common.envelope import Envelope
from services.common.eventlog import StoredEvent
from services.common.upcast import upcast

USER_ACTOR = "user:"


@dataclass(frozen=True)
class Run:
    """One allocation, as its events say."""

    allocation_id: str
    run_id: int = 0
    requested_at_ns: int = 0
    assigned: events_pb2.AllocationAssigned | None = None
    assigned_at_ns: int = 0
    started_at_ns: int = 0
    stop_reason: str = ""
    acknowledged: bool = False
    kill_reason: str = ""
    exited: events_pb2.AllocationExited | None = None
    canceled_reason: str | None = None

    @property
    def name(self) -> str:
        """ "run 2" (a trial's), else "allocation <id>" (a task's)."""
        return f"run {self.run_id}" if self.run_id else f"allocation {self.allocation_id}"

    @property
    def agents(self) -> str:
        if self.assigned is None:
            return ""
        return ", ".join(p.agent_id for p in self.assigned.placements) or self.assigned.agent_id


@dataclass
class Facts:
    """What the events read say, folded in log order (`fold`)."""

    runs: dict[str, Run] = field(default_factory=dict)
    # Trial id -> its TrialEnded, its searcher's stop reason, who killed it.
    trial_ends: dict[int, events_pb2.TrialEnded] = field(default_factory=dict)
    trial_stops: dict[int, str] = field(default_factory=dict)
    trial_killers: dict[int, str] = field(default_factory=dict)
    trials_created: set[int] = field(default_factory=set)
    # Experiment id -> its last state change (and who made it), who killed it, deleted.
    experiment_states: dict[int, tuple[events_pb2.ExperimentStateChanged, str]] = field(default_factory=dict)
    experiment_killers: dict[int, str] = field(default_factory=dict)
    experiments_deleted: set[int] = field(default_factory=set)

    def fold(self, envelope: Envelope) -> None:
        for event in upcast(envelope):
            kind = event.WhichOneof("payload")
            if kind is not None:
                self._fold(kind, getattr(event, kind), event)

    def _fold(self, kind: str, payload: object, envelope: Envelope) -> None:
        match payload:
            case events_pb2.TrialCreated():
                self.trials_created.add(payload.trial_id)
            case events_pb2.TrialEnded():
                self.trial_ends[payload.trial_id] = payload
            case events_pb2.TrialStopRequested():
                self.trial_stops[payload.trial_id] = payload.reason or "stopped by the searcher"
            case events_pb2.TrialKillRequested():
                self.trial_killers[payload.trial_id] = envelope.actor
            case events_pb2.ExperimentCreated() if not payload.activate:
                paused = events_pb2.ExperimentStateChanged(state=events_pb2.EXPERIMENT_STATE_PAUSED)
                self.experiment_states[payload.experiment_id] = (paused, envelope.actor)
            case events_pb2.ExperimentStateChanged():
                self.experiment_states[payload.experiment_id] = (payload, envelope.actor)
            case events_pb2.ExperimentKillRequested():
                self.experiment_killers[payload.experiment_id] = envelope.actor
            case events_pb2.ExperimentDeleted():
                self.experiments_deleted.add(payload.experiment_id)
            case _ if kind.startswith("allocation_"):
                self._run_event(payload, envelope)

    def _run_event(self, payload: object, envelope: Envelope) -> None:
        allocation_id = getattr(payload, "allocation_id", "")
        run = self.runs.get(allocation_id) or Run(allocation_id)
        at = envelope.occurred_at_ns
        match payload:
            case events_pb2.AllocationRequested():
                run = replace(run, run_id=payload.trial.trial_run_id, requested_at_ns=at)
            case events_pb2.AllocationAssigned():
                run = replace(run, assigned=payload, assigned_at_ns=at)
            case events_pb2.AllocationStarted():
                run = replace(run, started_at_ns=run.started_at_ns or at)
            case events_pb2.AllocationStopRequested():
                run = replace(run, stop_reason=run.stop_reason or payload.reason)
            case events_pb2.AllocationStopAcknowledged():
                run = replace(run, acknowledged=True)
            case events_pb2.AllocationKillRequested():
                run = replace(run, kill_reason=run.kill_reason or payload.reason or "asked")
            case events_pb2.AllocationExited():
                run = replace(run, exited=payload)
            case events_pb2.AllocationCanceled():
                run = replace(run, canceled_reason=payload.reason)
        self.runs[allocation_id] = run


def outcome(kind: str, key: str, events: Sequence[StoredEvent]) -> str:
    """The one line of a `kind` ("trial", "experiment", "allocation") named `key`."""
    facts = Facts()
    for stored in events:
        if not stored.skipped:
            facts.fold(stored.envelope)
    if kind == "trial":
        return trial_outcome(facts, int(key))
    if kind == "experiment":
        return experiment_outcome(facts, int(key))
    run = facts.runs.get(key)
    return run_outcome(run) if run is not None else "not requested within the log"


def trial_outcome(facts: Facts, trial_id: int) -> str:
    ended = facts.trial_ends.get(trial_id)
    if ended is not None:
        return _trial_end(facts, ended)
    runs = sorted(
        (run for run in facts.runs.values() if run.allocation_id.partition(".")[0] == str(trial_id)),
        key=lambda run: run.run_id,
    )
    stop = facts.trial_stops.get(trial_id)
    if not runs:
        return f"stopping: {stop}" if stop else "waiting: no run asked for yet"
    last = runs[-1]
    now = run_outcome(last)
    if last.exited is not None or last.canceled_reason is not None:
        return f"between runs: {last.name} {now}"
    return f"{now} (the searcher stopped it: {stop})" if stop else now


def _trial_end(facts: Facts, ended: events_pb2.TrialEnded) -> str:
    state = trial_state(ended.state) if ended.state else TrialState.COMPLETED
    if state == TrialState.CANCELED:
        killer = facts.trial_killers.get(ended.trial_id)
        if killer is None and ended.experiment_id in facts.experiment_killers:
            return f"{_killed_by(facts.experiment_killers[ended.experiment_id])} (its experiment)"
        return _killed_by(killer) if killer is not None else f"canceled: {ended.reason or 'killed'}"
    if state == TrialState.ERROR:
        return f"failed: {ended.reason}"
    stop = facts.trial_stops.get(ended.trial_id)
    if stop is not None:
        return f"stopped: {stop}"
    return f"completed: {ended.reason}" if ended.reason else "completed: its code finished"


def experiment_outcome(facts: Facts, experiment_id: int) -> str:
    if experiment_id in facts.experiments_deleted:
        return "deleted"
    changed, actor = facts.experiment_states.get(experiment_id, (None, ""))
    state = experiment_state(changed.state) if changed is not None else ExperimentState.ACTIVE
    killer = facts.experiment_killers.get(experiment_id)
    if state == ExperimentState.CANCELED and killer is not None:
        return f"canceled: {_killed_by(killer)}"
    if changed is not None and state in TERMINAL_STATES:
        return f"{state.value.lower()}: {changed.reason}" if changed.reason else state.value.lower()
    ended = sum(1 for trial_id in facts.trials_created if trial_id in facts.trial_ends)
    trials = f"{ended} of {len(facts.trials_created)} trials ended"
    if state == ExperimentState.PAUSED:
        return f"paused{_by(actor)}: {trials}"
    return f"{state.value.lower()}: {trials}"


def run_outcome(run: Run) -> str:
    """How an allocation ended, or where it stands."""
    if run.canceled_reason is not None:
        return f"canceled before it got slots: {run.canceled_reason}"
    exited = run.exited
    if exited is not None:
        return _exit(run, exited)
    if run.started_at_ns:
        doing = f"stopping ({run.stop_reason})" if run.stop_reason else "running"
        return f"{doing}: {run.name} on {run.agents} since {at(run.started_at_ns)}"
    if run.assigned is not None:
        return f"starting: {run.name} assigned to {run.agents} at {at(run.assigned_at_ns)}"
    return f"waiting for slots: {run.name} asked for at {at(run.requested_at_ns)}"


def _exit(run: Run, exited: events_pb2.AllocationExited) -> str:
    if exited.agent_lost:
        return f"ended with its agent lost: {exited.error or exited.agent_id}"
    if exited.killed:
        why = run.kill_reason or (
            f"past its stop's grace period: {run.stop_reason}" if run.stop_reason else ""
        )
        return f"killed ({why})" if why else "killed"
    if exited.exit_code == 0 and not exited.error:
        return f"stopped: {run.stop_reason}" if run.acknowledged else "exited 0"
    error = f": {exited.error}" if exited.error else ""
    return f"failed with exit code {exited.exit_code}{error}"


def _killed_by(actor: str) -> str:
    return f"killed by {actor.removeprefix(USER_ACTOR)}"


def _by(actor: str) -> str:
    return f" by {actor.removeprefix(USER_ACTOR)}" if actor.startswith(USER_ACTOR) else ""


def at(time_ns: int) -> str:
    """A time in a line: "2026-11-27 12:03:04 UTC"."""
    moment = datetime.datetime.fromtimestamp(time_ns / 1e9, tz=datetime.UTC)
    return f"{moment:%Y-%m-%d %H:%M:%S} UTC"
