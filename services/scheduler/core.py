"""The scheduler's pure core: which trial runs on which agent's slots, and how
a trial ends when its allocation exits.

Folds experiments, trials, agents, allocations and checkpoints; decides
AllocationAssigned (first come first served, by TrialCreated order, on one
agent), AllocationKillRequested (experiment killed) and TrialEnded. A failed
allocation is retried until the trial has restarted more than `max_restarts`
times.
"""

import json
from dataclasses import dataclass, field, replace
from typing import Any

from determined.proto import events_pb2
from services.common.envelope import Append, Envelope, aggregate, payload_of

TrialState = events_pb2.TrialState

DEFAULT_MAX_RESTARTS = 5
DEFAULT_SLOTS_PER_TRIAL = 1


@dataclass(frozen=True)
class Experiment:
    created: events_pb2.ExperimentCreated
    config: dict[str, Any]
    killed: bool = False

    @property
    def slots_per_trial(self) -> int:
        return int((self.config.get("resources") or {}).get("slots_per_trial", DEFAULT_SLOTS_PER_TRIAL))

    @property
    def max_restarts(self) -> int:
        return int(self.config.get("max_restarts", DEFAULT_MAX_RESTARTS))


@dataclass(frozen=True)
class Ending:
    state: TrialState
    reason: str


@dataclass(frozen=True)
class Trial:
    created: events_pb2.TrialCreated
    run_id: int = 0
    restarts: int = 0
    # The open allocation's id, "" when none runs.
    allocation_id: str = ""
    kill_requested: bool = False
    # Decided by an allocation exit, appended as TrialEnded by `decide`.
    ending: Ending | None = None
    ended: bool = False

    @property
    def trial_id(self) -> int:
        return self.created.trial_id

    @property
    def pending(self) -> bool:
        return not self.ended and self.ending is None and not self.allocation_id


@dataclass(frozen=True)
class Allocation:
    allocation_id: str
    trial_id: int
    agent_id: str
    slot_ids: tuple[int, ...]


@dataclass(frozen=True)
class Checkpoint:
    uuid: str
    steps_completed: int


@dataclass(frozen=True)
class SchedulerState:
    experiments: dict[int, Experiment] = field(default_factory=dict)
    # In TrialCreated order, the queue's order: a trial is added once and
    # replacing a key keeps its place.
    trials: dict[int, Trial] = field(default_factory=dict)
    # Agent id -> its slot ids, as last registered.
    agents: dict[str, tuple[int, ...]] = field(default_factory=dict)
    # Allocations that have not exited.
    allocations: dict[str, Allocation] = field(default_factory=dict)
    # Trial id -> its newest checkpoint by steps completed.
    checkpoints: dict[int, Checkpoint] = field(default_factory=dict)


@dataclass
class SchedulerCore:
    kinds: list[str] = field(
        default_factory=lambda: ["experiment", "trial", "agent", "allocation", "checkpoint"]
    )

    def initial_state(self) -> SchedulerState:
        return SchedulerState()

    def evolve(self, state: SchedulerState, envelope: Envelope) -> SchedulerState:
        return evolve(state, envelope)

    def decide(self, state: SchedulerState) -> list[Append]:
        return decide(state)


# -- evolve -----------------------------------------------------------------------


def evolve(state: SchedulerState, envelope: Envelope) -> SchedulerState:
    event = payload_of(envelope)
    match event:
        case events_pb2.ExperimentCreated():
            experiment = Experiment(event, json.loads(event.config_json or "{}"))
            return replace(state, experiments={**state.experiments, event.experiment_id: experiment})
        case events_pb2.ExperimentKillRequested():
            return _on_kill(state, event.experiment_id)
        case events_pb2.TrialCreated():
            return _with_trial(state, Trial(event))
        case events_pb2.TrialEnded():
            return _update_trial(state, event.trial_id, ended=True, allocation_id="")
        case events_pb2.AgentRegistered():
            slots = tuple(slot.slot_id for slot in event.slots)
            return replace(state, agents={**state.agents, event.agent_id: slots})
        case events_pb2.AllocationAssigned():
            return _on_assigned(state, event)
        case events_pb2.AllocationKillRequested():
            current = (
                event.trial_id in state.trials
                and state.trials[event.trial_id].allocation_id == event.allocation_id
            )
            return _update_trial(state, event.trial_id, kill_requested=True) if current else state
        case events_pb2.AllocationExited():
            return _on_exited(state, event)
        case events_pb2.CheckpointReported():
            return _on_checkpoint(state, event)
    return state


def _on_kill(state: SchedulerState, experiment_id: int) -> SchedulerState:
    experiment = state.experiments.get(experiment_id)
    if experiment is None:
        return state
    return replace(state, experiments={**state.experiments, experiment_id: replace(experiment, killed=True)})


def _on_assigned(state: SchedulerState, event: events_pb2.AllocationAssigned) -> SchedulerState:
    allocation = Allocation(event.allocation_id, event.trial_id, event.agent_id, tuple(event.slot_ids))
    state = replace(state, allocations={**state.allocations, event.allocation_id: allocation})
    return _update_trial(
        state,
        event.trial_id,
        run_id=event.trial_run_id,
        allocation_id=event.allocation_id,
        kill_requested=False,
    )


def _on_exited(state: SchedulerState, event: events_pb2.AllocationExited) -> SchedulerState:
    allocations = {k: v for k, v in state.allocations.items() if k != event.allocation_id}
    state = replace(state, allocations=allocations)
    trial = state.trials.get(event.trial_id)
    if trial is None or trial.ended or trial.allocation_id != event.allocation_id:
        return state
    experiment = state.experiments.get(trial.created.experiment_id)
    trial = replace(trial, allocation_id="")
    if event.killed or trial.kill_requested or (experiment is not None and experiment.killed):
        return _with_trial(state, replace(trial, ending=Ending(TrialState.TRIAL_STATE_CANCELED, "killed")))
    if event.exit_code == 0 and not event.error:
        return _with_trial(state, replace(trial, ending=Ending(TrialState.TRIAL_STATE_COMPLETED, "")))
    return _with_trial(state, _after_failure(trial, event, experiment))


def _after_failure(trial: Trial, event: events_pb2.AllocationExited, experiment: Experiment | None) -> Trial:
    """Counts a restart; the trial errors once it restarted more than allowed,
    else it waits in the queue again (keeping its place)."""
    restarts = trial.restarts + 1
    max_restarts = experiment.max_restarts if experiment is not None else DEFAULT_MAX_RESTARTS
    if restarts <= max_restarts:
        return replace(trial, restarts=restarts)
    reason = f"allocation {event.allocation_id} exited with code {event.exit_code}"
    if event.error:
        reason += f": {event.error}"
    reason += f" (restarted {trial.restarts} of {max_restarts} times)"
    return replace(trial, restarts=restarts, ending=Ending(TrialState.TRIAL_STATE_ERROR, reason))


def _on_checkpoint(state: SchedulerState, event: events_pb2.CheckpointReported) -> SchedulerState:
    newest = state.checkpoints.get(event.trial_id)
    if newest is not None and newest.steps_completed > event.steps_completed:
        return state
    checkpoint = Checkpoint(event.uuid, event.steps_completed)
    return replace(state, checkpoints={**state.checkpoints, event.trial_id: checkpoint})


def _update_trial(state: SchedulerState, trial_id: int, **changes: Any) -> SchedulerState:
    trial = state.trials.get(trial_id)
    return state if trial is None else _with_trial(state, replace(trial, **changes))


def _with_trial(state: SchedulerState, trial: Trial) -> SchedulerState:
    return replace(state, trials={**state.trials, trial.trial_id: trial})


# -- decide -----------------------------------------------------------------------


def decide(state: SchedulerState) -> list[Append]:
    appends: list[Append] = []
    for trial in state.trials.values():
        if trial.ended:
            continue
        experiment = state.experiments.get(trial.created.experiment_id)
        if trial.ending is not None:
            appends.append(_trial_ended(trial, trial.ending))
        elif experiment is not None and experiment.killed:
            appends += _stop(trial, state)
    return appends + _assignments(state)


def _stop(trial: Trial, state: SchedulerState) -> list[Append]:
    """A killed experiment's trial: cancel it when pending, kill its allocation
    when it runs."""
    if trial.pending:
        return [_trial_ended(trial, Ending(TrialState.TRIAL_STATE_CANCELED, "experiment killed"))]
    allocation = state.allocations.get(trial.allocation_id)
    if allocation is None or trial.kill_requested:
        return []
    event = events_pb2.AllocationKillRequested(
        allocation_id=allocation.allocation_id,
        trial_id=trial.trial_id,
        agent_id=allocation.agent_id,
        reason="experiment killed",
    )
    return [
        Append(
            aggregate("allocation", allocation.allocation_id),
            event,
            f"allocation-kill-{allocation.allocation_id}",
        )
    ]


def _trial_ended(trial: Trial, ending: Ending) -> Append:
    event = events_pb2.TrialEnded(
        trial_id=trial.trial_id,
        experiment_id=trial.created.experiment_id,
        state=ending.state,
        reason=ending.reason,
    )
    return Append(aggregate("trial", trial.trial_id), event, f"trial-ended-{trial.trial_id}")


def _assignments(state: SchedulerState) -> list[Append]:
    """First come first served: the oldest pending trial goes first; a trial
    that does not fit now blocks the ones behind it (no backfilling), unless
    no registered agent could ever hold it."""
    free = _free_slots(state)
    largest = max((len(slots) for slots in state.agents.values()), default=0)
    appends: list[Append] = []
    for trial in state.trials.values():
        experiment = state.experiments.get(trial.created.experiment_id)
        if not trial.pending or experiment is None or experiment.killed:
            continue
        needed = experiment.slots_per_trial
        agent_id = next((a for a in sorted(free) if len(free[a]) >= needed), None)
        if agent_id is None:
            if needed <= largest:
                break
            continue
        slot_ids, free[agent_id] = free[agent_id][:needed], free[agent_id][needed:]
        appends.append(_assigned(state, trial, experiment, agent_id, slot_ids))
    return appends


def _free_slots(state: SchedulerState) -> dict[str, list[int]]:
    used: dict[str, set[int]] = {}
    for allocation in state.allocations.values():
        used.setdefault(allocation.agent_id, set()).update(allocation.slot_ids)
    return {
        agent_id: [s for s in slots if s not in used.get(agent_id, set())]
        for agent_id, slots in state.agents.items()
    }


def _assigned(
    state: SchedulerState, trial: Trial, experiment: Experiment, agent_id: str, slot_ids: list[int]
) -> Append:
    run_id = trial.run_id + 1
    allocation_id = f"{trial.trial_id}.{run_id}"
    checkpoint = state.checkpoints.get(trial.trial_id)
    event = events_pb2.AllocationAssigned(
        allocation_id=allocation_id,
        trial_id=trial.trial_id,
        experiment_id=experiment.created.experiment_id,
        agent_id=agent_id,
        slot_ids=slot_ids,
        trial_run_id=run_id,
        config_json=experiment.created.config_json,
        hparams_json=trial.created.hparams_json,
        context_hash=experiment.created.context_hash,
        trial_seed=trial.created.trial_seed,
        latest_checkpoint=checkpoint.uuid if checkpoint else "",
        steps_completed=checkpoint.steps_completed if checkpoint else 0,
        owner=experiment.created.owner,
    )
    return Append(
        aggregate("allocation", allocation_id),
        event,
        f"allocation-assigned-{allocation_id}",
        expected_version=0,
    )
