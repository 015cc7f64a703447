"""The lifecycle of a detached run's trial (determined.experimental.core_v2): a pure core.

A detached run's script runs outside the cluster: the searcher creates its experiment's one
trial (core.py) and nothing asks the scheduler for slots (lifecycle.py leaves the experiment
alone). The script reports through the gateway and says it is alive
(UnmanagedTrialHeartbeat, each promising the next within its `timeout_s`) and how it ended
(UnmanagedTrialExited). This core decides the trial's end (TrialEnded):

- the script said it ended: COMPLETED or ERROR, as it said;
- its experiment was killed or canceled: CANCELED (the script's reports are refused from then);
- nothing heard from the script for longer than it promised (before its first heartbeat:
  DEFAULT_TIMEOUT_S from the trial's creation): ERROR, the script died without saying so.

Time is the log's: the newest folded envelope's occurred_at_ns, or the clock the shell folds
when the log is quiet (`tick`). The search core then ends the experiment as its trial ended.
"""

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from determined.common import states
from determined.proto import events_pb2
from services.common.decider import PureCore
from services.common.envelope import Append, Envelope, aggregate, payload_of
from services.searcher.lifecycle import Ending

TrialState = events_pb2.TrialState

TERMINAL_EXPERIMENT_STATES = states.proto_values(states.ExperimentState, states.TERMINAL_STATES)
# How long a detached trial may go without a heartbeat before its first one (Determined's
# 5 minutes); each heartbeat then names its own.
DEFAULT_TIMEOUT_S = 300.0
# The ends a script may say it reached.
SAID_ENDS = states.proto_values(states.TrialState, states.DETACHED_TRIAL_ENDS)


@dataclass(frozen=True)
class DetachedTrial:
    experiment_id: int
    # When the script was last heard from (its creation before the first heartbeat) and how
    # long it may then stay silent.
    heard_at_ns: int
    timeout_ns: int
    ending: Ending | None = None


@dataclass(frozen=True)
class UnmanagedState:
    # Detached runs' experiments that have not ended.
    experiments: frozenset[int] = frozenset()
    # Their live trials: an ended one leaves.
    trials: dict[int, DetachedTrial] = field(default_factory=dict)
    # The newest time folded: envelopes' occurred_at_ns and clock ticks.
    now_ns: int = 0


UNMANAGED_FOLDS = (
    "experiment_created",
    "experiment_state_changed",
    "experiment_kill_requested",
    "experiment_cancel_requested",
    "trial_created",
    "trial_ended",
    "unmanaged_trial_heartbeat",
    "unmanaged_trial_exited",
)


class UnmanagedTrialsCore(PureCore[UnmanagedState]):
    def __init__(self) -> None:
        super().__init__(UNMANAGED_FOLDS, UnmanagedState, evolve, decide, tick=tick)


def tick(state: UnmanagedState, now_ns: int) -> UnmanagedState:
    """The clock, folded: time never goes back."""
    return state if now_ns <= state.now_ns else replace(state, now_ns=now_ns)


def evolve(state: UnmanagedState, envelope: Envelope) -> UnmanagedState:
    state = tick(state, envelope.occurred_at_ns)
    event = payload_of(envelope)
    match event:
        case events_pb2.ExperimentCreated() if event.unmanaged:
            return replace(state, experiments=state.experiments | {event.experiment_id})
        case events_pb2.ExperimentStateChanged() if event.state in TERMINAL_EXPERIMENT_STATES:
            return _without_experiment(state, event.experiment_id)
        case events_pb2.ExperimentKillRequested():
            killed = Ending(TrialState.TRIAL_STATE_CANCELED, "killed by user")
            return _ending_all(state, event.experiment_id, killed)
        case events_pb2.ExperimentCancelRequested():
            canceled = Ending(TrialState.TRIAL_STATE_CANCELED, "canceled by user")
            return _ending_all(state, event.experiment_id, canceled)
        case events_pb2.TrialCreated() if event.experiment_id in state.experiments:
            trial = DetachedTrial(event.experiment_id, envelope.occurred_at_ns, _ns(DEFAULT_TIMEOUT_S))
            return _with_trial(state, event.trial_id, trial)
        case events_pb2.TrialEnded():
            return replace(state, trials={k: v for k, v in state.trials.items() if k != event.trial_id})
        case events_pb2.UnmanagedTrialHeartbeat():
            heard_at_ns, timeout_ns = envelope.occurred_at_ns, _ns(event.timeout_s)
            return _update_trial(
                state, event.trial_id, lambda t: replace(t, heard_at_ns=heard_at_ns, timeout_ns=timeout_ns)
            )
        case events_pb2.UnmanagedTrialExited() if event.state in SAID_ENDS:
            ending = Ending(event.state, event.reason)
            return _update_trial(state, event.trial_id, lambda t: replace(t, ending=ending))
    return state


def _ns(seconds: float) -> int:
    return int(max(seconds, 0.0) * 1e9)


def _without_experiment(state: UnmanagedState, experiment_id: int) -> UnmanagedState:
    trials = {k: v for k, v in state.trials.items() if v.experiment_id != experiment_id}
    return replace(state, experiments=state.experiments - {experiment_id}, trials=trials)


def _ending_all(state: UnmanagedState, experiment_id: int, ending: Ending) -> UnmanagedState:
    """Every live trial of the experiment ends so (unless it already said how it ended)."""
    for trial_id, trial in state.trials.items():
        if trial.experiment_id == experiment_id and trial.ending is None:
            state = _with_trial(state, trial_id, replace(trial, ending=ending))
    return state


def _update_trial(
    state: UnmanagedState, trial_id: int, change: Callable[[DetachedTrial], DetachedTrial]
) -> UnmanagedState:
    """A live trial's change; once it has an ending, nothing changes it (the first stands)."""
    trial = state.trials.get(trial_id)
    if trial is None or trial.ending is not None:
        return state
    return _with_trial(state, trial_id, change(trial))


def _with_trial(state: UnmanagedState, trial_id: int, trial: DetachedTrial) -> UnmanagedState:
    return replace(state, trials={**state.trials, trial_id: trial})


def decide(state: UnmanagedState) -> list[Append]:
    appends = []
    for trial_id, trial in state.trials.items():
        ending = trial.ending or _silence(trial, state.now_ns)
        if ending is not None:
            event = events_pb2.TrialEnded(
                trial_id=trial_id, experiment_id=trial.experiment_id, state=ending.state, reason=ending.reason
            )
            appends.append(Append(aggregate("trial", trial_id), event, f"trial-ended-{trial_id}"))
    return appends


def _silence(trial: DetachedTrial, now_ns: int) -> Ending | None:
    """ERROR once the script stayed silent past what it promised."""
    if now_ns - trial.heard_at_ns <= trial.timeout_ns:
        return None
    waited = trial.timeout_ns / 1e9
    reason = f"no heartbeat from the detached run's script for {waited:g} s (it died or lost the cluster)"
    return Ending(TrialState.TRIAL_STATE_ERROR, reason)
