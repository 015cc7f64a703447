"""The searcher's pure core: which trials an experiment has, which the search
is done with, and when the search is over.

Each experiment's search method (services/searcher/methods) is fed the
events other parts append — the experiment starting, validations, trials
ending — and answers with actions. Actions wait in the state until the core
decides them as events (TrialCreated, TrialStopRequested, TrialLengthSet);
the searcher's own events only confirm them. So replaying the log feeds the
method the same events in the same order and rebuilds the same state, and a
restarted searcher decides nothing twice.

Reasons: each TrialCreated says what the method did (its Create's reason)
and, for a trial created as another one was stopped or ended, which trial
it replaces and why; each TrialStopRequested the method's words. They are
words for people, never part of a decision.

Cancel (det experiment cancel): no trial is created any more, and the
experiment ends CANCELED once its live trials have stopped (the lifecycle
stops them gracefully). Continue (det experiment continue, single searcher
only): the search of an ended experiment starts again under the continued
config, its one trial reopened (TrialReopened) rather than created anew; so
the searcher keeps, for each ended single-searcher experiment, its trial's
request (`SearcherState.continuable`). The events of a continued experiment
carry message ids suffixed with how often it was continued ("-1", "-2"...),
as the first life's ids are taken.

Randomness: a trial's hyperparameters (when the method does not choose
them), request id and trial seed come from a `random.Random` seeded by the
experiment seed and the trial's request number, so a rerun with the same
`reproducibility.experiment_seed` draws the same trials.
"""

import json
import math
import random
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

from determined.common import states
from determined.common.expconf import ExperimentConfig, InvalidConfigError
from determined.proto import events_pb2
from services.common.config import experiment_config
from services.common.decider import PureCore
from services.common.envelope import Append, Envelope, aggregate, payload_of
from services.common.reasons import capped
from services.searcher.methods.base import (
    Action,
    Create,
    Decided,
    ExitReason,
    SearcherMetricError,
    SearchMethod,
    SetLength,
    Stop,
)
from services.searcher.methods.factory import UnsupportedSearcherError, search_method
from services.searcher.sampling import sample_hparams

ExperimentState = events_pb2.ExperimentState
TrialState = events_pb2.TrialState

TERMINAL_EXPERIMENT_STATES = states.proto_values(states.ExperimentState, states.TERMINAL_STATES)
TRIAL_SEED_BOUND = 2**31
# Progress is announced in steps of a hundredth (and at 1.0).
PROGRESS_STEP = 0.01


@dataclass(frozen=True)
class TrialRequest:
    """One trial the method asked for, drawn when it asked."""

    request: int
    request_id: str
    hparams_json: str
    trial_seed: int
    length: int
    # Why the method asked for it, in words (TrialCreated.reason).
    reason: str = ""
    trial_id: int = 0
    # Its terminal state once it ended (UNSPECIFIED while it lives).
    ended_state: int = TrialState.TRIAL_STATE_UNSPECIFIED
    # Why the searcher stopped it ("" while it did not): later validations
    # are not the method's business.
    stop_reason: str = ""
    # The trial said its hyperparameters are invalid (det.InvalidHP) before it ended.
    invalid_hp: bool = False

    @property
    def stopped(self) -> bool:
        return bool(self.stop_reason)


@dataclass(frozen=True)
class Search:
    experiment_id: int
    config: ExperimentConfig | None
    method: SearchMethod | None
    # Why the experiment cannot be searched (an unsupported searcher).
    error: str = ""
    active: bool = False
    started: bool = False
    killed: bool = False
    canceled: bool = False
    # How often a user continued the experiment (its events' message ids say so).
    continued: int = 0
    # Continued: its trial's TrialReopened is still to be appended.
    reopening: bool = False
    requests: dict[int, TrialRequest] = field(default_factory=dict)
    # Decided by the method, not yet in the log: request -> action.
    stops: dict[int, Stop] = field(default_factory=dict)
    lengths: tuple[SetLength, ...] = ()
    announced_progress: float = 0.0

    def request_of(self, trial_id: int) -> TrialRequest | None:
        return next((r for r in self.requests.values() if r.trial_id == trial_id), None)

    @property
    def pending_creates(self) -> list[TrialRequest]:
        return [r for r in self.requests.values() if not r.trial_id]

    @property
    def live_trials(self) -> int:
        return sum(1 for r in self.requests.values() if r.trial_id and not _exited(r))

    @property
    def stopping(self) -> bool:
        """Killed or canceled: no trial is created any more."""
        return self.killed or self.canceled

    def msg_id(self, first_life: str) -> str:
        """A message id of this search: `first_life` suffixed with how often the
        experiment was continued (the first life's ids are taken)."""
        return f"{first_life}-{self.continued}" if self.continued else first_life


def _exited(request: TrialRequest) -> bool:
    return request.ended_state != TrialState.TRIAL_STATE_UNSPECIFIED


@dataclass(frozen=True)
class Continuable:
    """An ended single-searcher experiment, as a continue needs it: its trial's
    request (None when it never had a trial) and how often it was continued."""

    request: TrialRequest | None
    continued: int


@dataclass(frozen=True)
class SearcherState:
    # Searches of experiments that have not ended: an ended one leaves.
    searches: dict[int, Search] = field(default_factory=dict)
    # Ended single-searcher experiments, which a user may continue.
    continuable: dict[int, Continuable] = field(default_factory=dict)
    # Trial ids are global across experiments: the next is one more than this.
    max_trial_id: int = 0


SEARCHER_FOLDS = (
    "experiment_created",
    "experiment_state_changed",
    "experiment_kill_requested",
    "experiment_progress_changed",
    "experiment_cancel_requested",
    "experiment_continued",
    "trial_created",
    "trial_reopened",
    "trial_stop_requested",
    "trial_length_set",
    "trial_validation_reported",
    "trial_early_exit_reported",
    "trial_ended",
)


class SearcherCore(PureCore[SearcherState]):
    def __init__(self) -> None:
        super().__init__(SEARCHER_FOLDS, SearcherState, evolve, decide)


# -- evolve -----------------------------------------------------------------------


def evolve(state: SearcherState, envelope: Envelope) -> SearcherState:
    event = payload_of(envelope)
    if isinstance(event, events_pb2.ExperimentCreated):
        return _with_search(state, _new_search(event))
    if isinstance(event, events_pb2.ExperimentContinued):
        return _on_continued(state, event)
    if isinstance(event, events_pb2.TrialCreated):
        state = replace(state, max_trial_id=max(state.max_trial_id, event.trial_id))
    experiment_id = getattr(event, "experiment_id", None)
    search = state.searches.get(experiment_id) if isinstance(experiment_id, int) else None
    if search is None:
        return state
    match event:
        case events_pb2.ExperimentStateChanged() if event.state in TERMINAL_EXPERIMENT_STATES:
            return _ended(state, search)
        case events_pb2.ExperimentStateChanged():
            return _with_search(state, _on_state_changed(search, event.state))
        case _:
            changed = _on_search_event(search, event)
            return state if changed is search else _with_search(state, changed)


def _new_search(event: events_pb2.ExperimentCreated) -> Search:
    """The experiment's search; one that cannot run (a searcher this core
    does not know, a stored config today's model refuses) ends it ERROR."""
    try:
        config = experiment_config(event.config_json)
    except InvalidConfigError as exc:
        error = "the stored experiment config is not valid any more: " + "; ".join(exc.errors)
        return Search(event.experiment_id, None, None, error=error)
    if event.unmanaged:
        return _detached_search(event.experiment_id, config)
    try:
        method: SearchMethod | None = search_method(config)
        error = ""
    except UnsupportedSearcherError as exc:
        method, error = None, str(exc)
    return _start(Search(event.experiment_id, config, method, error=error, active=event.activate))


def _detached_search(experiment_id: int, config: ExperimentConfig) -> Search:
    """A detached run (core_v2): no search method; its one trial is the script's, created at
    once with the config's hyperparameters, trained and ended by the script
    (services/searcher/unmanaged.py); the experiment ends as that trial does."""
    search = Search(experiment_id, config, None, active=True, started=True)
    rng = random.Random(f"{config.reproducibility.experiment_seed or 0}/0")
    trial = TrialRequest(
        request=0,
        request_id=str(uuid.UUID(int=rng.getrandbits(128), version=4)),
        hparams_json=json.dumps(_sampled(config, rng), sort_keys=True),
        trial_seed=rng.randrange(TRIAL_SEED_BOUND),
        length=0,
        reason="the detached run's script",
    )
    return _with_request(search, trial)


def _ended(state: SearcherState, search: Search) -> SearcherState:
    """The ended search leaves; a single-searcher one stays continuable."""
    searches = {k: v for k, v in state.searches.items() if k != search.experiment_id}
    if search.config is None or search.method is None or search.config.searcher.name != "single":
        return replace(state, searches=searches)
    trial = next((r for r in search.requests.values() if r.trial_id), None)
    continuable = {**state.continuable, search.experiment_id: Continuable(trial, search.continued)}
    return replace(state, searches=searches, continuable=continuable)


def _on_continued(state: SearcherState, event: events_pb2.ExperimentContinued) -> SearcherState:
    """The search of a continued experiment, under its new config: its one
    trial reopened (or, if it never had one, created as at the start). The
    gateway continues only ended single-searcher experiments: any other is
    ignored."""
    ended = state.continuable.get(event.experiment_id)
    if ended is None or event.experiment_id in state.searches:
        return state
    continuable = {k: v for k, v in state.continuable.items() if k != event.experiment_id}
    search = _continued_search(event, ended)
    return _with_search(replace(state, continuable=continuable), search)


def _continued_search(event: events_pb2.ExperimentContinued, ended: Continuable) -> Search:
    continued = ended.continued + 1
    try:
        config = experiment_config(event.config_json)
    except InvalidConfigError as exc:
        error = "the continued experiment config is not valid: " + "; ".join(exc.errors)
        return Search(event.experiment_id, None, None, error=error, continued=continued)
    if config.searcher.name != "single":
        error = "only a single-searcher experiment can be continued"
        return Search(event.experiment_id, config, None, error=error, continued=continued)
    search = Search(event.experiment_id, config, search_method(config), active=True, continued=continued)
    if ended.request is None:
        return _start(search)
    assert search.method is not None
    decided = search.method.initial_trials()
    (create,) = decided.actions
    assert isinstance(create, Create)
    request = replace(
        ended.request,
        length=create.length,
        ended_state=TrialState.TRIAL_STATE_UNSPECIFIED,
        stop_reason="",
        invalid_hp=False,
    )
    return replace(
        search,
        method=decided.method.trial_created(request.request, create),
        started=True,
        reopening=True,
        requests={request.request: request},
    )


def _on_state_changed(search: Search, experiment_state: int) -> Search:
    if experiment_state == ExperimentState.EXPERIMENT_STATE_ACTIVE:
        return _start(replace(search, active=True))
    if experiment_state == ExperimentState.EXPERIMENT_STATE_PAUSED:
        return replace(search, active=False)
    return search


def _start(search: Search) -> Search:
    """The method's initial trials, the first time the experiment is active."""
    if search.started or not search.active or search.method is None:
        return search
    return _apply(replace(search, started=True), search.method.initial_trials())


def _on_search_event(search: Search, event: Any) -> Search:
    match event:
        case events_pb2.ExperimentKillRequested():
            return replace(search, killed=True)
        case events_pb2.ExperimentCancelRequested():
            return replace(search, canceled=True)
        case events_pb2.TrialReopened():
            return replace(search, reopening=False)
        case events_pb2.ExperimentProgressChanged():
            return replace(search, announced_progress=event.progress)
        case events_pb2.TrialCreated():
            return _on_trial_created(search, event)
        case events_pb2.TrialStopRequested():
            request = search.request_of(event.trial_id)
            stops = {k: v for k, v in search.stops.items() if request is None or k != request.request}
            return replace(search, stops=stops)
        case events_pb2.TrialLengthSet():
            request = search.request_of(event.trial_id)
            lengths = tuple(
                s
                for s in search.lengths
                if request is None or (s.request, s.rung) != (request.request, event.rung)
            )
            return replace(search, lengths=lengths)
        case events_pb2.TrialValidationReported():
            return _on_validation(search, event)
        case events_pb2.TrialEarlyExitReported() if event.reason == ExitReason.INVALID_HP.value:
            request = search.request_of(event.trial_id)
            return search if request is None else _with_request(search, replace(request, invalid_hp=True))
        case events_pb2.TrialEnded():
            return _on_trial_ended(search, event)
    return search


def _on_trial_created(search: Search, event: events_pb2.TrialCreated) -> Search:
    request = next((r for r in search.requests.values() if r.request_id == event.request_id), None)
    if request is None:
        return search
    return _with_request(search, replace(request, trial_id=event.trial_id))


def _on_validation(search: Search, event: events_pb2.TrialValidationReported) -> Search:
    """Feeds the method a validation of a trial it still searches with. A
    validation without the searcher's metric is the trial's problem, not the
    search's: the harness refuses to send one, and the method ignores it."""
    request = search.request_of(event.trial_id)
    if search.method is None or request is None or _exited(request) or request.stopped:
        return search
    try:
        metrics = _numbers(json.loads(event.metrics_json or "{}"))
        decided = search.method.validation_reported(request.request, metrics, event.steps_completed)
    except (SearcherMetricError, ValueError):
        return search
    return _apply(search, decided, answering=request.request)


# The gateway stores NaN and the infinities as these strings (PostgreSQL's jsonb
# refuses them); the search reads them as the numbers they were.
_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _numbers(metrics: dict[str, Any]) -> dict[str, Any]:
    return {
        name: _NON_FINITE.get(value, value) if isinstance(value, str) else value
        for name, value in metrics.items()
    }


def _on_trial_ended(search: Search, event: events_pb2.TrialEnded) -> Search:
    request = search.request_of(event.trial_id)
    if request is None or _exited(request):
        return search
    search = _with_request(
        search, replace(request, ended_state=event.state or TrialState.TRIAL_STATE_COMPLETED)
    )
    if search.method is None:  # a detached run's trial: no method to tell
        return search
    reason = ExitReason.INVALID_HP if request.invalid_hp else _EARLY_EXIT_REASONS.get(event.state)
    if reason is not None and search.method is not None:
        decided = search.method.trial_exited_early(request.request, reason)
        search = _apply(search, decided, answering=request.request)
    assert search.method is not None
    return _apply(search, search.method.trial_exited(request.request), answering=request.request)


_EARLY_EXIT_REASONS = {
    TrialState.TRIAL_STATE_ERROR: ExitReason.ERRORED,
    TrialState.TRIAL_STATE_CANCELED: ExitReason.USER_CANCELED,
}


def _apply(search: Search, decided: Decided, answering: int | None = None) -> Search:
    """The method's next value, with its actions waiting to be decided;
    `answering` is the request whose validation or end the method answered."""
    search = replace(search, method=decided.method)
    for action in decided.actions:
        search = _queue(search, action, answering)
    return search


def _queue(search: Search, action: Action, answering: int | None) -> Search:
    match action:
        case Create():
            return _queue_create(search, action, answering)
        case Stop():
            request = search.requests[action.request]
            search = _with_request(search, replace(request, stop_reason=action.reason))
            return replace(search, stops={**search.stops, action.request: action})
        case SetLength():
            return replace(search, lengths=(*search.lengths, action))
    return search


def _queue_create(search: Search, create: Create, answering: int | None) -> Search:
    """Draws the trial now, from an RNG seeded by (experiment seed, request):
    the same seed always yields the same hyperparameters, request id and seed."""
    assert search.method is not None and search.config is not None
    request = len(search.requests)
    experiment_seed = search.config.reproducibility.experiment_seed or 0
    rng = random.Random(f"{experiment_seed}/{request}")
    hparams = dict(create.hparams) if create.hparams is not None else _sampled(search.config, rng)
    trial = TrialRequest(
        request=request,
        request_id=str(uuid.UUID(int=rng.getrandbits(128), version=4)),
        hparams_json=json.dumps(hparams, sort_keys=True),
        trial_seed=rng.randrange(TRIAL_SEED_BOUND),
        length=create.length,
        reason=_creation_reason(search, create, answering),
    )
    search = replace(search, method=search.method.trial_created(request, create))
    return _with_request(search, trial)


def _creation_reason(search: Search, create: Create, answering: int | None) -> str:
    """The Create's reason, and the trial it replaces: the one whose stop or
    end the method answered with it."""
    replaced = search.requests.get(answering) if answering is not None else None
    why = _why_replaced(replaced) if replaced is not None else ""
    if replaced is None or not why or not replaced.trial_id:
        return capped(create.reason)
    return capped(f"{create.reason}; replaces trial {replaced.trial_id} ({why})")


def _why_replaced(request: TrialRequest) -> str:
    """Why a trial left room for another ("" when it did not)."""
    if request.invalid_hp:
        return "invalid hyperparameters"
    if _exited(request):
        return f"ended {states.trial_state(request.ended_state).value}"
    return request.stop_reason


def _sampled(config: ExperimentConfig, rng: random.Random) -> dict[str, Any]:
    return sample_hparams(config.hyperparameters, rng)


def _with_request(search: Search, request: TrialRequest) -> Search:
    return replace(search, requests={**search.requests, request.request: request})


def _with_search(state: SearcherState, search: Search) -> SearcherState:
    return replace(state, searches={**state.searches, search.experiment_id: search})


# -- decide -----------------------------------------------------------------------


def decide(state: SearcherState) -> list[Append]:
    appends: list[Append] = []
    next_trial_id = state.max_trial_id + 1
    for search in state.searches.values():
        created = _trials_created(search, next_trial_id)
        next_trial_id += len(created)
        # Stops first: a trial the search is done with should hear so at once.
        appends += _reopened(search) + _stops(search) + _lengths(search) + created + _progress(search)
        if not created:
            appends += _ending(search)
    return appends


def _trials_created(search: Search, first_trial_id: int) -> list[Append]:
    if not search.active or search.stopping:
        return []
    return [_trial_created(search, r, first_trial_id + n) for n, r in enumerate(search.pending_creates)]


def _trial_created(search: Search, request: TrialRequest, trial_id: int) -> Append:
    event = events_pb2.TrialCreated(
        trial_id=trial_id,
        experiment_id=search.experiment_id,
        request_id=request.request_id,
        hparams_json=request.hparams_json,
        trial_seed=request.trial_seed,
        length=request.length,
        reason=request.reason,
    )
    msg_id = search.msg_id(f"trial-created-{search.experiment_id}-{request.request}")
    return Append(aggregate("trial", trial_id), event, msg_id, expected_version=0)


def _reopened(search: Search) -> list[Append]:
    """A continued experiment's trial trains again."""
    request = next(iter(search.requests.values()), None)
    if not search.reopening or request is None:
        return []
    event = events_pb2.TrialReopened(
        trial_id=request.trial_id,
        experiment_id=search.experiment_id,
        length=request.length,
        reason="experiment continued by a user",
    )
    msg_id = f"trial-reopened-{request.trial_id}-{search.continued}"
    return [Append(aggregate("trial", request.trial_id), event, msg_id)]


def _stops(search: Search) -> list[Append]:
    appends = []
    for stop in search.stops.values():
        trial_id = search.requests[stop.request].trial_id
        if trial_id:
            event = events_pb2.TrialStopRequested(
                trial_id=trial_id,
                experiment_id=search.experiment_id,
                reason=capped(stop.reason),
                rung=stop.rung,
            )
            appends.append(
                Append(aggregate("trial", trial_id), event, search.msg_id(f"trial-stop-{trial_id}"))
            )
    return appends


def _lengths(search: Search) -> list[Append]:
    appends = []
    for length in search.lengths:
        trial_id = search.requests[length.request].trial_id
        if trial_id:
            event = events_pb2.TrialLengthSet(
                trial_id=trial_id, experiment_id=search.experiment_id, rung=length.rung, length=length.length
            )
            msg_id = search.msg_id(f"trial-length-{trial_id}-{length.rung}")
            appends.append(Append(aggregate("trial", trial_id), event, msg_id))
    return appends


def _progress(search: Search) -> list[Append]:
    """The search's progress, once it moved by a hundredth; none once it was
    killed or canceled (its trials stop unfinished: Determined records 1.0
    only for a search that completed)."""
    if search.method is None or search.stopping:
        return []
    progress = round(min(max(search.method.progress(), 0.0), 1.0), 2)
    if progress < search.announced_progress + PROGRESS_STEP:
        return []
    event = events_pb2.ExperimentProgressChanged(experiment_id=search.experiment_id, progress=progress)
    msg_id = search.msg_id(f"experiment-progress-{search.experiment_id}-{round(progress * 100)}")
    return [Append(aggregate("experiment", search.experiment_id), event, msg_id)]


def _ending(search: Search) -> list[Append]:
    """The experiment's terminal state once every trial the search asked for
    has exited and it asks for nothing more (Determined's shutdown rule)."""
    if search.error:
        return [_state_changed(search, ExperimentState.EXPERIMENT_STATE_ERROR, search.error)]
    if search.live_trials or (search.pending_creates and not search.stopping):
        return []
    if search.killed:
        return [_state_changed(search, ExperimentState.EXPERIMENT_STATE_CANCELED, "killed by user")]
    if search.canceled:
        return [_state_changed(search, ExperimentState.EXPERIMENT_STATE_CANCELED, "canceled by user")]
    if not search.started:
        return []
    return [_state_changed(search, *_shutdown_state(search))]


def _shutdown_state(search: Search) -> tuple[ExperimentState, str]:
    """COMPLETED unless every trial errored (ERROR) or was canceled (CANCELED)."""
    states = [r.ended_state for r in search.requests.values()]
    if not states:
        return ExperimentState.EXPERIMENT_STATE_COMPLETED, "the search wanted no trials"
    if all(s == TrialState.TRIAL_STATE_ERROR for s in states):
        return ExperimentState.EXPERIMENT_STATE_ERROR, "every trial failed"
    if all(s == TrialState.TRIAL_STATE_CANCELED for s in states):
        return ExperimentState.EXPERIMENT_STATE_CANCELED, "every trial was canceled"
    return ExperimentState.EXPERIMENT_STATE_COMPLETED, "the search is done"


def _state_changed(search: Search, experiment_state: ExperimentState, reason: str) -> Append:
    event = events_pb2.ExperimentStateChanged(
        experiment_id=search.experiment_id, state=experiment_state, reason=reason
    )
    msg_id = search.msg_id(f"experiment-ended-{search.experiment_id}")
    return Append(aggregate("experiment", search.experiment_id), event, msg_id)
