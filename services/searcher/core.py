"""The searcher's pure core: which trials an experiment has, and when its
search is over.

Folds ExperimentCreated / ExperimentStateChanged / ExperimentKillRequested and
TrialCreated / TrialEnded; decides TrialCreated (the `single`, `random` and
`grid` methods) and the experiment's terminal ExperimentStateChanged. Randomness is
a `random.Random` seeded from the experiment seed and the trial's index, so
replaying the log decides the very same trials, and so does a rerun: a new
experiment with the same `reproducibility.experiment_seed`.

Errors:

    SearcherError
    └── UnsupportedSearcherError   a searcher name this core cannot run
"""

import json
import random
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

from determined.proto import events_pb2
from services.common.envelope import Append, Envelope, aggregate, payload_of
from services.searcher.sampling import grid_point, grid_size, sample_hparams

ExperimentState = events_pb2.ExperimentState
TrialState = events_pb2.TrialState

TERMINAL_EXPERIMENT_STATES = frozenset(
    {
        ExperimentState.EXPERIMENT_STATE_COMPLETED,
        ExperimentState.EXPERIMENT_STATE_CANCELED,
        ExperimentState.EXPERIMENT_STATE_ERROR,
    }
)
SUPPORTED_SEARCHERS = ("single", "random", "grid")
TRIAL_SEED_BOUND = 2**31


class SearcherError(Exception):
    pass


class UnsupportedSearcherError(SearcherError):
    pass


@dataclass(frozen=True)
class SearchPlan:
    """How many trials a search wants in all, and at most at once (0 = no cap)."""

    max_trials: int
    max_concurrent_trials: int

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "SearchPlan":
        searcher = config.get("searcher") or {}
        name = searcher.get("name", "single")
        if name == "single":
            return cls(max_trials=1, max_concurrent_trials=1)
        if name == "random":
            return cls(int(searcher.get("max_trials", 1)), int(searcher.get("max_concurrent_trials") or 0))
        if name == "grid":
            points = grid_size(config.get("hyperparameters") or {})
            return cls(points, int(searcher.get("max_concurrent_trials") or 0))
        raise UnsupportedSearcherError(
            f"searcher {name!r} is not supported (yet): use one of {SUPPORTED_SEARCHERS}"
        )


@dataclass(frozen=True)
class Search:
    experiment_id: int
    config: dict[str, Any]
    active: bool
    killed: bool = False
    # Set once the experiment reached a terminal state: nothing more to do.
    ended: bool = False
    # Trial id -> its terminal state (UNSPECIFIED while it lives), in creation order.
    trials: dict[int, TrialState] = field(default_factory=dict)

    @property
    def live_trials(self) -> int:
        return sum(1 for state in self.trials.values() if state == TrialState.TRIAL_STATE_UNSPECIFIED)


@dataclass(frozen=True)
class SearcherState:
    searches: dict[int, Search] = field(default_factory=dict)
    # Trial ids are global across experiments: the next is one more than this.
    max_trial_id: int = 0


@dataclass
class SearcherCore:
    kinds: list[str] = field(default_factory=lambda: ["experiment", "trial"])

    def initial_state(self) -> SearcherState:
        return SearcherState()

    def evolve(self, state: SearcherState, envelope: Envelope) -> SearcherState:
        return evolve(state, envelope)

    def decide(self, state: SearcherState) -> list[Append]:
        return decide(state)


def evolve(state: SearcherState, envelope: Envelope) -> SearcherState:
    event = payload_of(envelope)
    match event:
        case events_pb2.ExperimentCreated():
            search = Search(event.experiment_id, json.loads(event.config_json or "{}"), active=event.activate)
            return _with_search(state, search)
        case events_pb2.ExperimentStateChanged():
            return _on_state_changed(state, event)
        case events_pb2.ExperimentKillRequested():
            return _update(state, event.experiment_id, killed=True)
        case events_pb2.TrialCreated():
            state = replace(state, max_trial_id=max(state.max_trial_id, event.trial_id))
            return _with_trial_state(
                state, event.experiment_id, event.trial_id, TrialState.TRIAL_STATE_UNSPECIFIED
            )
        case events_pb2.TrialEnded():
            known = (
                event.experiment_id in state.searches
                and event.trial_id in state.searches[event.experiment_id].trials
            )
            return (
                _with_trial_state(state, event.experiment_id, event.trial_id, event.state) if known else state
            )
    return state


def _with_trial_state(
    state: SearcherState, experiment_id: int, trial_id: int, trial_state: TrialState
) -> SearcherState:
    search = state.searches.get(experiment_id)
    if search is None:
        return state
    return _with_search(state, replace(search, trials={**search.trials, trial_id: trial_state}))


def _on_state_changed(state: SearcherState, event: events_pb2.ExperimentStateChanged) -> SearcherState:
    if event.state in TERMINAL_EXPERIMENT_STATES:
        return _update(state, event.experiment_id, ended=True)
    if event.state == ExperimentState.EXPERIMENT_STATE_ACTIVE:
        return _update(state, event.experiment_id, active=True)
    if event.state == ExperimentState.EXPERIMENT_STATE_PAUSED:
        return _update(state, event.experiment_id, active=False)
    return state


def _update(state: SearcherState, experiment_id: int, **changes: Any) -> SearcherState:
    search = state.searches.get(experiment_id)
    return state if search is None else _with_search(state, replace(search, **changes))


def _with_search(state: SearcherState, search: Search) -> SearcherState:
    return replace(state, searches={**state.searches, search.experiment_id: search})


def decide(state: SearcherState) -> list[Append]:
    appends: list[Append] = []
    next_trial_id = state.max_trial_id + 1
    for search in state.searches.values():
        if search.ended:
            continue
        created = _trials_to_create(search, next_trial_id)
        next_trial_id += len(created)
        appends += created or _ending(search)
    return appends


def _trials_to_create(search: Search, first_trial_id: int) -> list[Append]:
    if not search.active or search.killed:
        return []
    try:
        plan = SearchPlan.from_config(search.config)
    except UnsupportedSearcherError:
        return []
    room = plan.max_trials - len(search.trials)
    if plan.max_concurrent_trials:
        room = min(room, plan.max_concurrent_trials - search.live_trials)
    first_index = len(search.trials)
    return [_trial_created(search, first_trial_id + n, first_index + n) for n in range(max(room, 0))]


def _trial_created(search: Search, trial_id: int, index: int) -> Append:
    """One new trial, drawn from an RNG seeded by (experiment seed, index): the
    same seed always yields the same hyperparameters, request id and trial seed."""
    experiment_seed = (search.config.get("reproducibility") or {}).get("experiment_seed", 0)
    rng = random.Random(f"{experiment_seed}/{index}")
    hparams = _hparams(search.config, index, rng)
    request_id = uuid.UUID(int=rng.getrandbits(128), version=4)
    event = events_pb2.TrialCreated(
        trial_id=trial_id,
        experiment_id=search.experiment_id,
        request_id=str(request_id),
        hparams_json=json.dumps(hparams, sort_keys=True),
        trial_seed=rng.randrange(TRIAL_SEED_BOUND),
    )
    msg_id = f"trial-created-{search.experiment_id}-{index}"
    return Append(aggregate("trial", trial_id), event, msg_id, expected_version=0)


def _hparams(config: dict[str, Any], index: int, rng: random.Random) -> dict[str, Any]:
    """A grid search takes its points in order, last point first (as Determined
    does); the others sample."""
    hyperparameters = config.get("hyperparameters") or {}
    if (config.get("searcher") or {}).get("name") == "grid":
        return grid_point(hyperparameters, grid_size(hyperparameters) - 1 - index)
    return sample_hparams(hyperparameters, rng)


def _ending(search: Search) -> list[Append]:
    """The experiment's terminal state once every trial it will have is closed."""
    if search.live_trials:
        return []
    if search.killed:
        return [_state_changed(search, ExperimentState.EXPERIMENT_STATE_CANCELED, "killed by user")]
    try:
        plan = SearchPlan.from_config(search.config)
    except UnsupportedSearcherError as error:
        return [_state_changed(search, ExperimentState.EXPERIMENT_STATE_ERROR, str(error))]
    if not search.active or len(search.trials) < plan.max_trials:
        return []
    return [_state_changed(search, *_shutdown_state(list(search.trials.values())))]


def _shutdown_state(trial_states: list[TrialState]) -> tuple[ExperimentState, str]:
    """Determined's shutdown rule: COMPLETED unless every trial errored (ERROR)
    or every trial was canceled (CANCELED)."""
    if not trial_states:
        return ExperimentState.EXPERIMENT_STATE_COMPLETED, "the search wanted no trials"
    if all(s == TrialState.TRIAL_STATE_ERROR for s in trial_states):
        return ExperimentState.EXPERIMENT_STATE_ERROR, "every trial failed"
    if all(s == TrialState.TRIAL_STATE_CANCELED for s in trial_states):
        return ExperimentState.EXPERIMENT_STATE_CANCELED, "every trial was canceled"
    return ExperimentState.EXPERIMENT_STATE_COMPLETED, "the search is done"


def _state_changed(search: Search, experiment_state: ExperimentState, reason: str) -> Append:
    event = events_pb2.ExperimentStateChanged(
        experiment_id=search.experiment_id, state=experiment_state, reason=reason
    )
    return Append(
        aggregate("experiment", search.experiment_id), event, f"experiment-ended-{search.experiment_id}"
    )
