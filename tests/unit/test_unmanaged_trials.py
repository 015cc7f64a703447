"""Detached runs (core_v2) in the searcher's pure cores: the search core creates the one
trial, the lifecycle core asks no slots for it, and the unmanaged core ends it as the script
said, when its experiment is killed or canceled, or when the script went silent."""

import json

import pytest
from google.protobuf.message import Message
from support import pure_core

from determined.proto import events_pb2 as ev
from services.common.envelope import Append, wrap
from services.searcher.core import SearcherCore, SearcherState
from services.searcher.lifecycle import LifecycleState, TrialLifecycleCore
from services.searcher.unmanaged import DEFAULT_TIMEOUT_S, UnmanagedState, UnmanagedTrialsCore

ES, TS = ev.ExperimentState, ev.TrialState
S = 1_000_000_000  # a second, in ns
search, lifecycle, unmanaged = SearcherCore(), TrialLifecycleCore(), UnmanagedTrialsCore()


def detached(experiment_id: int = 1, unmanaged: bool = True) -> ev.ExperimentCreated:
    """What core_v2.init sends: a searcher only for the UI, the script's hparams as consts."""
    config = {
        "searcher": {"name": "random", "metric": "loss", "max_trials": 5, "max_length": 10},
        "hyperparameters": {"lr": 0.1, "model": {"layers": 3}},
        "entrypoint": "python3 train.py",
    }
    return ev.ExperimentCreated(
        experiment_id=experiment_id, config_json=json.dumps(config), activate=True, unmanaged=unmanaged
    )


def fold(core: object, *payloads: Message, state: object = None, at_s: float = 0.0) -> object:
    state = state if state is not None else core.initial_state()  # type: ignore[attr-defined]
    for n, payload in enumerate(payloads):
        envelope = wrap(Append("x/1", payload, f"given-{n}"), actor="test", occurred_at_ns=int(at_s * S))
        state = core.evolve(state, envelope)  # type: ignore[attr-defined]
    return state


def folded(payload: Message, state: UnmanagedState, at_s: float) -> UnmanagedState:
    after = fold(unmanaged, payload, state=state, at_s=at_s)
    assert isinstance(after, UnmanagedState)
    return after


def created(trial_id: int = 1, experiment_id: int = 1) -> ev.TrialCreated:
    return ev.TrialCreated(trial_id=trial_id, experiment_id=experiment_id, request_id="r")


def heartbeat(timeout_s: float, trial_id: int = 1) -> ev.UnmanagedTrialHeartbeat:
    return ev.UnmanagedTrialHeartbeat(trial_id=trial_id, experiment_id=1, timeout_s=timeout_s)


def exited(state: ev.TrialState, reason: str = "", trial_id: int = 1) -> ev.UnmanagedTrialExited:
    return ev.UnmanagedTrialExited(trial_id=trial_id, experiment_id=1, state=state, reason=reason)


def endings(state: UnmanagedState) -> list[tuple[int, int, str]]:
    decided = unmanaged.decide(state)
    assert all(a.msg_id == f"trial-ended-{a.payload.trial_id}" for a in decided)
    return [(a.payload.trial_id, a.payload.state, a.payload.reason) for a in decided]


def running(at_s: float = 0.0, timeout_s: float | None = None) -> UnmanagedState:
    """A detached run's trial created at `at_s`, with one heartbeat then if `timeout_s`."""
    state = fold(unmanaged, detached(), created(), at_s=at_s)
    if timeout_s is not None:
        state = fold(unmanaged, heartbeat(timeout_s), state=state, at_s=at_s)
    assert isinstance(state, UnmanagedState)
    return state


# -- the search core ------------------------------------------------------------------


def settle_search(state: SearcherState) -> tuple[SearcherState, list[Append]]:
    def given(*payloads: Message, state: SearcherState) -> SearcherState:
        folded = fold(search, *payloads, state=state)
        assert isinstance(folded, SearcherState)
        return folded

    settled, decided = pure_core.settle(search, state, given)
    return settled, decided


def test_the_search_creates_one_trial_with_the_scripts_hparams_whatever_the_searcher() -> None:
    state = fold(search, detached())
    assert isinstance(state, SearcherState)
    _, decided = settle_search(state)
    [append] = decided
    trial = append.payload
    assert isinstance(trial, ev.TrialCreated)
    assert json.loads(trial.hparams_json) == {"lr": 0.1, "model": {"layers": 3}}
    assert (trial.trial_id, trial.length, trial.reason) == (1, 0, "the detached run's script")


@pytest.mark.parametrize(
    ("trial_state", "experiment_state"),
    [
        (TS.TRIAL_STATE_COMPLETED, ES.EXPERIMENT_STATE_COMPLETED),
        (TS.TRIAL_STATE_ERROR, ES.EXPERIMENT_STATE_ERROR),
        (TS.TRIAL_STATE_CANCELED, ES.EXPERIMENT_STATE_CANCELED),
    ],
)
def test_the_experiment_ends_as_its_trial(trial_state: ev.TrialState, experiment_state: int) -> None:
    trial_ended = ev.TrialEnded(trial_id=1, experiment_id=1, state=trial_state)
    state = fold(search, detached(), _created(), trial_ended)
    assert isinstance(state, SearcherState)
    [append] = search.decide(state)
    assert isinstance(append.payload, ev.ExperimentStateChanged)
    assert append.payload.state == experiment_state


def test_the_experiment_lives_while_its_trial_does() -> None:
    state = fold(search, detached(), _created())
    assert isinstance(state, SearcherState)
    assert search.decide(state) == []


def _created() -> ev.TrialCreated:
    """The search's own TrialCreated for the detached run, as it decided it."""
    state = fold(search, detached())
    assert isinstance(state, SearcherState)
    [append] = search.decide(state)
    assert isinstance(append.payload, ev.TrialCreated)
    return append.payload


# -- the lifecycle core -----------------------------------------------------------------


def test_no_slots_are_asked_for_a_detached_runs_trial() -> None:
    state = fold(lifecycle, detached(), _created())
    assert isinstance(state, LifecycleState)
    assert lifecycle.decide(state) == [] and state.trials == {}


def test_a_managed_trial_still_asks_for_slots() -> None:
    state = fold(lifecycle, detached(unmanaged=False), _created())
    assert isinstance(state, LifecycleState)
    assert [type(a.payload) for a in lifecycle.decide(state)] == [ev.AllocationRequested]


# -- the unmanaged core -----------------------------------------------------------------


@pytest.mark.parametrize("said", [TS.TRIAL_STATE_COMPLETED, TS.TRIAL_STATE_ERROR])
def test_the_trial_ends_as_the_script_said(said: ev.TrialState) -> None:
    state = fold(unmanaged, exited(said, "ValueError: boom"), state=running(timeout_s=60), at_s=10)
    assert isinstance(state, UnmanagedState)
    assert endings(state) == [(1, said, "ValueError: boom")]


def test_a_script_cannot_say_it_ended_in_another_state() -> None:
    state = fold(unmanaged, exited(TS.TRIAL_STATE_ACTIVE), state=running(timeout_s=60), at_s=10)
    assert isinstance(state, UnmanagedState)
    assert endings(state) == []


def test_heartbeats_keep_the_trial_alive_and_silence_ends_it_error() -> None:
    state = running(timeout_s=30)
    state = unmanaged.tick(state, 30 * S)
    assert endings(state) == []
    state = folded(heartbeat(30), state, at_s=25)
    assert endings(unmanaged.tick(state, 55 * S)) == []
    [(trial_id, ended, reason)] = endings(unmanaged.tick(state, 55 * S + 1))
    assert (trial_id, ended) == (1, TS.TRIAL_STATE_ERROR)
    assert reason == "no heartbeat from the detached run's script for 30 s (it died or lost the cluster)"


def test_before_its_first_heartbeat_the_trial_gets_the_default_timeout() -> None:
    state = running(at_s=100)
    assert endings(unmanaged.tick(state, int((100 + DEFAULT_TIMEOUT_S) * S))) == []
    assert len(endings(unmanaged.tick(state, int((100 + DEFAULT_TIMEOUT_S) * S) + 1))) == 1


def test_any_event_moves_time_and_time_never_goes_back() -> None:
    state = running(timeout_s=5)
    later = fold(unmanaged, created(trial_id=9, experiment_id=77), state=state, at_s=6)
    assert isinstance(later, UnmanagedState)
    assert [t for t, _, _ in endings(later)] == [1]  # trial 9 is no detached run's
    assert unmanaged.tick(later, 0).now_ns == 6 * S


@pytest.mark.parametrize(
    ("request_", "reason"),
    [
        (ev.ExperimentKillRequested(experiment_id=1), "killed by user"),
        (ev.ExperimentCancelRequested(experiment_id=1), "canceled by user"),
    ],
)
def test_a_killed_or_canceled_experiment_cancels_its_trial(request_: Message, reason: str) -> None:
    state = fold(unmanaged, request_, state=running(timeout_s=60), at_s=1)
    assert isinstance(state, UnmanagedState)
    assert endings(state) == [(1, TS.TRIAL_STATE_CANCELED, reason)]


def test_the_first_ending_stands_and_an_ended_trial_leaves() -> None:
    state = fold(
        unmanaged,
        exited(TS.TRIAL_STATE_COMPLETED),
        ev.ExperimentKillRequested(experiment_id=1),
        heartbeat(1),
        state=running(timeout_s=60),
        at_s=1,
    )
    assert isinstance(state, UnmanagedState)
    assert endings(state) == [(1, TS.TRIAL_STATE_COMPLETED, "")]
    ended = fold(
        unmanaged, ev.TrialEnded(trial_id=1, experiment_id=1, state=TS.TRIAL_STATE_COMPLETED), state=state
    )
    assert isinstance(ended, UnmanagedState)
    assert ended.trials == {} and endings(unmanaged.tick(ended, 10**6 * S)) == []


def test_an_ended_experiment_leaves() -> None:
    done = ev.ExperimentStateChanged(experiment_id=1, state=ES.EXPERIMENT_STATE_COMPLETED)
    state = fold(unmanaged, done, state=running(timeout_s=60))
    assert state == UnmanagedState(now_ns=0)


def test_a_managed_experiments_trials_are_not_watched() -> None:
    state = fold(unmanaged, detached(unmanaged=False), created(), heartbeat(1), at_s=0)
    assert isinstance(state, UnmanagedState)
    assert endings(unmanaged.tick(state, 10**6 * S)) == []
