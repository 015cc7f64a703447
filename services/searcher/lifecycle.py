"""The trial lifecycle's pure core: a trial is a task that owns its runs.

It asks for slots (AllocationRequested, one per run, with everything the run
needs: hyperparameters, the checkpoint to resume from), asks a running
allocation to stop (AllocationStopRequested: searcher stop, pause) or to die
(AllocationKillRequested: kill), takes a pause's stop back when the experiment
is activated before the trial acknowledged it (AllocationStopWithdrawn: the
trial trains on; see services/common/stops.py), and decides what an
allocation's end means for the trial (Determined's task/allocation split):

- exit 0 after the trial acknowledged a stop request: stopped, to be resumed
  later from its latest checkpoint (no restart counted);
- exit 0 otherwise: the trial's code finished, the trial COMPLETED;
- killed after a stop request (past its grace period), even one withdrawn
  since: stopped as well;
- the agent went away under it: run again, no restart counted;
- a failure the trial said a restart cannot fix (`fatal`: an uncaught
  ReportError): ERROR at once, whatever `max_restarts`;
- any other failure: a restart, until more than `max_restarts` (ERROR);
- nothing running and the searcher is done with it: COMPLETED; killed by a
  user: CANCELED; its experiment canceled: CANCELED (a running one is first
  asked to stop, as on a pause: it checkpoints and exits); its experiment
  paused: it waits.

A single-searcher experiment's trial is kept once it ended (with its newest
checkpoint and run number), and the experiment once it ended
(`LifecycleState.continuable`): a user may continue it (ExperimentContinued),
and the search then reopens the trial (TrialReopened), which asks for a run
that resumes from that checkpoint under the continued config.

Each request says why, for people (AllocationRequested.reason): the trial's
first run, or how the run before it ended ("trial 7 run 2: resumes after
agent-2 was lost, from checkpoint 3be9d38e at 700 batches").

It runs in the searcher's process, beside the search core, with its own
consumer. The scheduler knows none of this: it reads requests and exits.
"""

import copy
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from determined.common import states
from determined.common.expconf import ExperimentConfig, InvalidConfigError
from determined.proto import events_pb2
from services.common.config import experiment_config
from services.common.decider import PureCore
from services.common.envelope import Append, Envelope, aggregate, payload_of
from services.common.reasons import capped
from services.common.stops import NO_STOP, Stops
from services.common.upcast import TRIAL_TASK

ExperimentState = events_pb2.ExperimentState
TrialState = events_pb2.TrialState

TERMINAL_EXPERIMENT_STATES = states.proto_values(states.ExperimentState, states.TERMINAL_STATES)
# The reason of the stop a pause asks for.
PAUSED = "experiment paused"
# The reason of the stop a cancel asks for, and of the trial's end.
CANCELED = "experiment canceled"
# A checkpoint's uuid is named by its first characters, as `det checkpoint` lists do.
SHORT_UUID = 8


@dataclass(frozen=True)
class Experiment:
    created: events_pb2.ExperimentCreated
    config: ExperimentConfig
    paused: bool
    killed: bool = False
    canceled: bool = False
    # How often a user continued it (its trials' TrialEnded message ids say so).
    continued: int = 0
    # Its trial, once ended, kept for a continue (single searcher only).
    ended_trial: "Trial | None" = None

    @property
    def continuable(self) -> bool:
        return self.config.searcher.name == "single"


@dataclass(frozen=True)
class Run:
    """The trial's open allocation."""

    allocation_id: str
    # What the stop requests folded so far add up to (a pause's may be withdrawn).
    stops: Stops = NO_STOP
    # Asked to stop at some point: a kill past the grace period is then no failure.
    stop_requested: bool = False
    # (event id, reason) of each stop asked, in order.
    stop_reasons: tuple[tuple[str, str], ...] = ()
    kill_requested: bool = False
    # How many of its stops were withdrawn: the next stop and withdrawal are numbered after them.
    withdrawals: int = 0

    @property
    def stop_reason(self) -> str:
        """Why it was asked to stop: the first request still standing, else
        the first asked (an acknowledged stop stands even when withdrawn)."""
        standing = (why for event_id, why in self.stop_reasons if event_id in self.stops.standing)
        return next(standing, self.stop_reasons[0][1] if self.stop_reasons else "")


@dataclass(frozen=True)
class Ending:
    state: TrialState
    reason: str


@dataclass(frozen=True)
class Checkpoint:
    uuid: str
    steps_completed: int


@dataclass(frozen=True)
class Trial:
    created: events_pb2.TrialCreated
    # The newest run requested (allocation "<trial>.<run_id>").
    run_id: int = 0
    run: Run | None = None
    restarts: int = 0
    searcher_length: int = 0
    # Set by TrialStopRequested: the searcher is done with the trial.
    searcher_stop: str | None = None
    kill_requested: bool = False
    # What an exit decided, appended as TrialEnded by `decide`.
    ending: Ending | None = None
    checkpoint: Checkpoint | None = None
    # Why the next run is asked for, in words: how the last one ended.
    next_run_reason: str = ""

    @property
    def trial_id(self) -> int:
        return self.created.trial_id


@dataclass(frozen=True)
class Continuable:
    """An ended single-searcher experiment as a continue needs it: its
    ExperimentCreated without its config (the continue brings the new one),
    its ended trial and how often it was continued."""

    created: events_pb2.ExperimentCreated
    trial: "Trial | None"
    continued: int


@dataclass(frozen=True)
class LifecycleState:
    experiments: dict[int, Experiment] = field(default_factory=dict)
    # Ended single-searcher experiments, which a user may continue.
    continuable: dict[int, Continuable] = field(default_factory=dict)
    # Live trials only: an ended trial leaves the state.
    trials: dict[int, Trial] = field(default_factory=dict)
    # Allocation id -> its trial, for the allocations of live trials.
    allocation_trials: dict[str, int] = field(default_factory=dict)


LIFECYCLE_FOLDS = (
    "experiment_created",
    "experiment_state_changed",
    "experiment_kill_requested",
    "experiment_cancel_requested",
    "experiment_continued",
    "trial_created",
    "trial_reopened",
    "trial_kill_requested",
    "trial_stop_requested",
    "trial_length_set",
    "trial_ended",
    "checkpoint_reported",
    "allocation_requested",
    "allocation_stop_requested",
    "allocation_stop_acknowledged",
    "allocation_stop_withdrawn",
    "allocation_kill_requested",
    "allocation_canceled",
    "allocation_exited",
)


class TrialLifecycleCore(PureCore[LifecycleState]):
    def __init__(self) -> None:
        super().__init__(LIFECYCLE_FOLDS, LifecycleState, evolve, decide)


# -- evolve -----------------------------------------------------------------------


def evolve(state: LifecycleState, envelope: Envelope) -> LifecycleState:
    event = payload_of(envelope)
    match event:
        case events_pb2.ExperimentCreated():
            return _on_experiment_created(state, event)
        case events_pb2.ExperimentStateChanged():
            return _on_experiment_state(state, event)
        case events_pb2.ExperimentKillRequested():
            return _update_experiment(state, event.experiment_id, killed=True)
        case events_pb2.ExperimentCancelRequested():
            return _update_experiment(state, event.experiment_id, canceled=True)
        case events_pb2.ExperimentContinued():
            return _on_continued(state, event)
        case events_pb2.TrialCreated():
            trial = Trial(event, searcher_length=event.length)
            return _with_trial(state, trial) if event.experiment_id in state.experiments else state
        case events_pb2.TrialReopened():
            return _on_reopened(state, event)
        case events_pb2.TrialKillRequested():
            return _update_trial(state, event.trial_id, kill_requested=True)
        case events_pb2.TrialStopRequested():
            return _update_trial(
                state, event.trial_id, searcher_stop=event.reason or "stopped by the searcher"
            )
        case events_pb2.TrialLengthSet():
            return _update_trial(state, event.trial_id, searcher_length=event.length)
        case events_pb2.TrialEnded():
            return _without_trial(_keep_ended_trial(state, event.trial_id), event.trial_id)
        case events_pb2.CheckpointReported():
            return _on_checkpoint(state, event)
    return _allocation_event(state, event, envelope.event_id)


def _allocation_event(state: LifecycleState, event: Any, event_id: str) -> LifecycleState:
    match event:
        case events_pb2.AllocationRequested() if event.HasField("trial"):
            return _on_requested(state, event)
        case (
            events_pb2.AllocationStopRequested()
            | events_pb2.AllocationStopAcknowledged()
            | events_pb2.AllocationStopWithdrawn()
        ):
            return _on_stop_event(state, event, event_id)
        case events_pb2.AllocationKillRequested():
            return _update_run(state, event.allocation_id, kill_requested=True)
        case events_pb2.AllocationCanceled() | events_pb2.AllocationExited():
            return _on_run_closed(state, event)
    return state


def _on_experiment_created(state: LifecycleState, event: events_pb2.ExperimentCreated) -> LifecycleState:
    """Tracks the experiment; one whose stored config today's model refuses
    has no trials (the searcher ends it ERROR, saying why). A detached run's
    trial runs nowhere on the cluster: its lifecycle is unmanaged.py's."""
    if event.unmanaged:
        return state
    try:
        config = experiment_config(event.config_json)
    except InvalidConfigError:
        return state
    experiment = Experiment(event, config, paused=not event.activate)
    return replace(state, experiments={**state.experiments, event.experiment_id: experiment})


def _on_experiment_state(state: LifecycleState, event: events_pb2.ExperimentStateChanged) -> LifecycleState:
    if event.state in TERMINAL_EXPERIMENT_STATES:
        trials = [t for t in state.trials.values() if t.created.experiment_id == event.experiment_id]
        for trial in trials:
            state = _without_trial(state, trial.trial_id)
        return _experiment_ended(state, event.experiment_id)
    if event.state == ExperimentState.EXPERIMENT_STATE_PAUSED:
        return _update_experiment(state, event.experiment_id, paused=True)
    if event.state == ExperimentState.EXPERIMENT_STATE_ACTIVE:
        return _update_experiment(state, event.experiment_id, paused=False)
    return state


def _experiment_ended(state: LifecycleState, experiment_id: int) -> LifecycleState:
    """The ended experiment leaves; a single-searcher one stays continuable."""
    experiment = state.experiments.get(experiment_id)
    experiments = {k: v for k, v in state.experiments.items() if k != experiment_id}
    if experiment is None or not experiment.continuable:
        return replace(state, experiments=experiments)
    ended = Continuable(_with_config(experiment.created, ""), experiment.ended_trial, experiment.continued)
    return replace(state, experiments=experiments, continuable={**state.continuable, experiment_id: ended})


def _with_config(created: events_pb2.ExperimentCreated, config_json: str) -> events_pb2.ExperimentCreated:
    """A copy of `created` with this config ("": none, while it is kept ended)."""
    copied = copy.deepcopy(created)
    copied.config_json = config_json
    return copied


def _keep_ended_trial(state: LifecycleState, trial_id: int) -> LifecycleState:
    """Keeps a single-searcher experiment's trial as it ended, for a continue."""
    trial = state.trials.get(trial_id)
    experiment = state.experiments.get(trial.created.experiment_id) if trial is not None else None
    if trial is None or experiment is None or not experiment.continuable:
        return state
    return _update_experiment(state, experiment.created.experiment_id, ended_trial=trial)


def _on_continued(state: LifecycleState, event: events_pb2.ExperimentContinued) -> LifecycleState:
    """A continued experiment is tracked again, under its new config (one the
    config model refuses: not; the searcher ends it ERROR)."""
    ended = state.continuable.get(event.experiment_id)
    if ended is None or event.experiment_id in state.experiments:
        return state
    try:
        config = experiment_config(event.config_json)
    except InvalidConfigError:
        return state
    created = _with_config(ended.created, event.config_json)
    experiment = Experiment(
        created, config, paused=False, continued=ended.continued + 1, ended_trial=ended.trial
    )
    continuable = {k: v for k, v in state.continuable.items() if k != event.experiment_id}
    return replace(
        state, experiments={**state.experiments, event.experiment_id: experiment}, continuable=continuable
    )


def _on_reopened(state: LifecycleState, event: events_pb2.TrialReopened) -> LifecycleState:
    """The continued experiment's trial trains again: a new run, from its
    newest checkpoint, its restarts counted from 0 (as Determined does)."""
    experiment = state.experiments.get(event.experiment_id)
    trial = experiment.ended_trial if experiment is not None else None
    if trial is None or trial.trial_id != event.trial_id or trial.trial_id in state.trials:
        return state
    reopened = Trial(
        trial.created,
        run_id=trial.run_id,
        searcher_length=event.length,
        checkpoint=trial.checkpoint,
        next_run_reason=event.reason or "continued",
    )
    return _with_trial(state, reopened)


def _on_requested(state: LifecycleState, event: events_pb2.AllocationRequested) -> LifecycleState:
    trial = state.trials.get(event.trial.trial_id)
    if trial is None:
        return state
    state = replace(state, allocation_trials={**state.allocation_trials, event.allocation_id: trial.trial_id})
    return _with_trial(state, replace(trial, run_id=event.trial.trial_run_id, run=Run(event.allocation_id)))


def _on_checkpoint(state: LifecycleState, event: events_pb2.CheckpointReported) -> LifecycleState:
    trial = state.trials.get(event.trial_id)
    if trial is None or (trial.checkpoint and trial.checkpoint.steps_completed > event.steps_completed):
        return state
    return _with_trial(state, replace(trial, checkpoint=Checkpoint(event.uuid, event.steps_completed)))


def _on_run_closed(
    state: LifecycleState, event: events_pb2.AllocationExited | events_pb2.AllocationCanceled
) -> LifecycleState:
    """The trial's open run ended: exited, or canceled before it was
    assigned (nothing ran, nothing to judge)."""
    allocation_id = event.allocation_id
    trial_id = state.allocation_trials.get(allocation_id)
    trial = state.trials.get(trial_id) if trial_id is not None else None
    if trial is None or trial.run is None or trial.run.allocation_id != allocation_id:
        return state
    allocations = {k: v for k, v in state.allocation_trials.items() if k != allocation_id}
    state = replace(state, allocation_trials=allocations)
    if isinstance(event, events_pb2.AllocationCanceled):
        why = _resumes(trial, trial.run, f"was canceled before it got slots ({event.reason})")
        return _with_trial(state, replace(trial, run=None, next_run_reason=why))
    max_restarts = state.experiments[trial.created.experiment_id].config.max_restarts
    return _with_trial(state, _after_exit(trial, trial.run, event, max_restarts))


def _after_exit(trial: Trial, run: Run, event: events_pb2.AllocationExited, max_restarts: int) -> Trial:
    """What the end of the trial's run means (see the module docstring)."""
    trial = replace(trial, run=None)
    succeeded = event.exit_code == 0 and not event.error and not event.killed
    if succeeded:
        if run.stops.acknowledged:
            return replace(trial, next_run_reason=_resumes(trial, run, f"stopped ({run.stop_reason})"))
        return replace(trial, ending=Ending(TrialState.TRIAL_STATE_COMPLETED, trial.searcher_stop or ""))
    if event.agent_lost:
        lost = f"lost its agent ({event.error or event.agent_id})"
        return replace(trial, next_run_reason=_resumes(trial, run, lost))
    if event.killed and (run.stop_requested or run.kill_requested):
        killed = "was killed" + (
            f" after it was asked to stop ({run.stop_reason})" if run.stop_reason else ""
        )
        return replace(trial, next_run_reason=_resumes(trial, run, killed))
    return _after_failure(trial, event, max_restarts)


def _resumes(trial: Trial, run: Run, ended: str) -> str:
    """Why the trial's next run is asked for, once `run` (its run
    `trial.run_id`) ended as `ended` says: "resumes after run 1 stopped (...)",
    or, when a pause stopped it, "activated after a pause"."""
    if run.stop_reason == PAUSED:
        return "activated after a pause"
    return f"resumes after run {trial.run_id} {ended}"


def _after_failure(trial: Trial, event: events_pb2.AllocationExited, max_restarts: int) -> Trial:
    """A restart, unless none is left or the trial said a restart cannot help (`fatal`)."""
    restarts = trial.restarts + 1
    if restarts <= max_restarts and not event.fatal:
        failed = f"failed with exit code {event.exit_code}" + (f": {event.error}" if event.error else "")
        why = f"restart {restarts} of {max_restarts}: run {trial.run_id} {failed}"
        return replace(trial, restarts=restarts, next_run_reason=why)
    reason = f"allocation {event.allocation_id} exited with code {event.exit_code}"
    if event.error:
        reason += f": {event.error}"
    if event.fatal:
        reason += " (not restarted: a restart would fail the same way)"
    else:
        reason += f" (restarted {trial.restarts} of {max_restarts} times)"
    return replace(trial, restarts=restarts, ending=Ending(TrialState.TRIAL_STATE_ERROR, reason))


def _update_experiment(state: LifecycleState, experiment_id: int, **changes: Any) -> LifecycleState:
    experiment = state.experiments.get(experiment_id)
    if experiment is None:
        return state
    return replace(state, experiments={**state.experiments, experiment_id: replace(experiment, **changes)})


def _update_trial(state: LifecycleState, trial_id: int, **changes: Any) -> LifecycleState:
    trial = state.trials.get(trial_id)
    return state if trial is None else _with_trial(state, replace(trial, **changes))


def _on_stop_event(
    state: LifecycleState,
    event: events_pb2.AllocationStopRequested
    | events_pb2.AllocationStopAcknowledged
    | events_pb2.AllocationStopWithdrawn,
    event_id: str,
) -> LifecycleState:
    """A stop request, acknowledgement or withdrawal of its trial's open run."""

    def changed(run: Run) -> Run:
        stops = run.stops.folded(event_id, event)
        asked = isinstance(event, events_pb2.AllocationStopRequested)
        took_back = (
            isinstance(event, events_pb2.AllocationStopWithdrawn) and stops.standing != run.stops.standing
        )
        reasons = run.stop_reasons
        if isinstance(event, events_pb2.AllocationStopRequested) and event_id not in dict(reasons):
            reasons = (*reasons, (event_id, event.reason))
        return replace(
            run,
            stops=stops,
            stop_requested=run.stop_requested or asked,
            stop_reasons=reasons,
            withdrawals=run.withdrawals + took_back,
        )

    return _changed_run(state, event.allocation_id, changed)


def _update_run(state: LifecycleState, allocation_id: str, **changes: Any) -> LifecycleState:
    return _changed_run(state, allocation_id, lambda run: replace(run, **changes))


def _changed_run(state: LifecycleState, allocation_id: str, change: Callable[[Run], Run]) -> LifecycleState:
    """`change` made to the run `allocation_id` if it is its trial's open one."""
    trial_id = state.allocation_trials.get(allocation_id)
    trial = state.trials.get(trial_id) if trial_id is not None else None
    if trial is None or trial.run is None or trial.run.allocation_id != allocation_id:
        return state
    return _with_trial(state, replace(trial, run=change(trial.run)))


def _with_trial(state: LifecycleState, trial: Trial) -> LifecycleState:
    return replace(state, trials={**state.trials, trial.trial_id: trial})


def _without_trial(state: LifecycleState, trial_id: int) -> LifecycleState:
    if trial_id not in state.trials:
        return state
    trials = {k: v for k, v in state.trials.items() if k != trial_id}
    allocations = {k: v for k, v in state.allocation_trials.items() if v != trial_id}
    return replace(state, trials=trials, allocation_trials=allocations)


# -- decide -----------------------------------------------------------------------


def decide(state: LifecycleState) -> list[Append]:
    appends: list[Append] = []
    for trial in state.trials.values():
        experiment = state.experiments.get(trial.created.experiment_id)
        if experiment is not None:
            appends += _decide_trial(trial, experiment)
    return appends


def _decide_trial(trial: Trial, experiment: Experiment) -> list[Append]:
    continued = experiment.continued
    if trial.ending is not None:
        return [_trial_ended(trial, trial.ending, continued)]
    killed = trial.kill_requested or experiment.killed
    if trial.run is not None:
        return _signal_run(trial, trial.run, killed, _graceful_stop(trial, experiment))
    if killed:
        reason = "killed by a user" if trial.kill_requested else "experiment killed"
        return [_trial_ended(trial, Ending(TrialState.TRIAL_STATE_CANCELED, reason), continued)]
    if experiment.canceled:
        return [_trial_ended(trial, Ending(TrialState.TRIAL_STATE_CANCELED, CANCELED), continued)]
    if trial.searcher_stop is not None:
        return [_trial_ended(trial, Ending(TrialState.TRIAL_STATE_COMPLETED, trial.searcher_stop), continued)]
    if experiment.paused:
        return []
    return [_allocation_requested(trial, experiment)]


def _graceful_stop(trial: Trial, experiment: Experiment) -> str | None:
    """Why the trial's running allocation should stop gracefully (None: it should not)."""
    if trial.searcher_stop is not None:
        return trial.searcher_stop
    if experiment.canceled:
        return CANCELED
    return PAUSED if experiment.paused else None


def _signal_run(trial: Trial, run: Run, killed: bool, stop_reason: str | None) -> list[Append]:
    """Asks the running allocation to die (kill) or to stop gracefully
    (`stop_reason`: searcher done, experiment canceled or paused), each once
    while it stands; takes a pause's stop back once the experiment is active
    again, unless the trial acknowledged it (a later pause then asks anew)."""
    if killed:
        return [] if run.kill_requested else [_kill_requested(trial, run)]
    if run.kill_requested or (stop_reason is not None and run.stops.requested):
        return []
    if stop_reason is None:
        own_stop_only = run.stops.standing == {_stop_msg_id(run)} and not run.stops.acknowledged
        return [_stop_withdrawn(trial, run)] if own_stop_only else []
    return [_stop_requested(trial, run, stop_reason)]


def _kill_requested(trial: Trial, run: Run) -> Append:
    reason = "killed by a user" if trial.kill_requested else "experiment killed"
    event = events_pb2.AllocationKillRequested(
        allocation_id=run.allocation_id, trial_id=trial.trial_id, task_id=str(trial.trial_id), reason=reason
    )
    return Append(aggregate("allocation", run.allocation_id), event, f"allocation-kill-{run.allocation_id}")


def _stop_requested(trial: Trial, run: Run, reason: str) -> Append:
    event = events_pb2.AllocationStopRequested(
        allocation_id=run.allocation_id, task_id=str(trial.trial_id), reason=reason
    )
    return Append(aggregate("allocation", run.allocation_id), event, _stop_msg_id(run))


def _stop_msg_id(run: Run) -> str:
    """The id of the run's stop request: `allocation-stop-<allocation>` for
    the first, `...-<n+1>` for one asked after n were withdrawn."""
    number = f"-{run.withdrawals + 1}" if run.withdrawals else ""
    return f"allocation-stop-{run.allocation_id}{number}"


def _stop_withdrawn(trial: Trial, run: Run) -> Append:
    """Takes back the run's pause stop (the only one standing)."""
    event = events_pb2.AllocationStopWithdrawn(
        allocation_id=run.allocation_id,
        task_id=str(trial.trial_id),
        reason="experiment activated",
        stop_event_id=_stop_msg_id(run),
    )
    msg_id = f"allocation-stop-withdrawn-{run.allocation_id}-{run.withdrawals + 1}"
    return Append(aggregate("allocation", run.allocation_id), event, msg_id)


def _trial_ended(trial: Trial, ending: Ending, continued: int) -> Append:
    """The trial's end; `continued`: how often its experiment was continued
    (the message id of each life's end is its own)."""
    event = events_pb2.TrialEnded(
        trial_id=trial.trial_id,
        experiment_id=trial.created.experiment_id,
        state=ending.state,
        reason=ending.reason,
    )
    msg_id = f"trial-ended-{trial.trial_id}" + (f"-{continued}" if continued else "")
    return Append(aggregate("trial", trial.trial_id), event, msg_id)


def _allocation_requested(trial: Trial, experiment: Experiment) -> Append:
    """The trial's next run: its hyperparameters, and the newest checkpoint to
    resume from (or the searcher's warm-start checkpoint, on a first run)."""
    run_id = trial.run_id + 1
    allocation_id = f"{trial.trial_id}.{run_id}"
    config, created = experiment.config, experiment.created
    checkpoint = trial.checkpoint
    launch = events_pb2.TrialLaunch(
        experiment_id=created.experiment_id,
        trial_id=trial.trial_id,
        trial_run_id=run_id,
        config_json=created.config_json,
        hparams_json=trial.created.hparams_json,
        context_hash=created.context_hash,
        trial_seed=trial.created.trial_seed,
        latest_checkpoint=checkpoint.uuid if checkpoint else _warm_start(experiment),
        steps_completed=checkpoint.steps_completed if checkpoint else 0,
        owner=created.owner,
        searcher_length=trial.searcher_length,
    )
    resources = config.resources
    reason = f"trial {trial.trial_id}'s first run" if run_id == 1 else _next_run_reason(trial, run_id)
    event = events_pb2.AllocationRequested(
        allocation_id=allocation_id,
        task_id=str(trial.trial_id),
        task_type=TRIAL_TASK,
        slots=resources.slots_per_trial,
        resource_pool=resources.resource_pool,
        job_id=aggregate("experiment", created.experiment_id),
        weight=resources.weight,
        priority=resources.priority or 0,
        max_slots=resources.max_slots or 0,
        preemptible=True,
        owner=created.owner,
        reason=capped(reason),
        trial=launch,
    )
    return Append(
        aggregate("allocation", allocation_id),
        event,
        f"allocation-requested-{allocation_id}",
        expected_version=0,
    )


def _warm_start(experiment: Experiment) -> str:
    """What a trial's first run starts from: the searcher's source_checkpoint_uuid, or the
    latest checkpoint of its source_trial_id when the experiment was created ("": none)."""
    created, searcher = experiment.created, experiment.config.searcher
    return created.source_trial_checkpoint_uuid or searcher.source_checkpoint_uuid or ""


def _next_run_reason(trial: Trial, run_id: int) -> str:
    """ "trial 7 run 2: resumes after run 1 stopped (...), from checkpoint 3be9d38e at 700 batches"."""
    why = f"trial {trial.trial_id} run {run_id}" + (
        f": {trial.next_run_reason}" if trial.next_run_reason else ""
    )
    checkpoint = trial.checkpoint
    if checkpoint is None:
        return why
    return f"{why}, from checkpoint {checkpoint.uuid[:SHORT_UUID]} at {checkpoint.steps_completed} batches"
