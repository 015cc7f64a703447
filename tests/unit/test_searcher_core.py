"""The searcher's pure core: given events, then the appends it decides."""

import json

from google.protobuf.message import Message
from support import pure_core

from determined.proto import events_pb2 as ev
from services.common.envelope import Append, wrap
from services.searcher.core import SearcherCore, SearcherState

ES, TS = ev.ExperimentState, ev.TrialState
core = SearcherCore()
HPARAMS = {"lr": {"type": "const", "val": 0.1}, "layers": {"type": "int", "minval": 1, "maxval": 100}}


def given(*payloads: Message, state: SearcherState | None = None) -> SearcherState:
    state = state or core.initial_state()
    for n, payload in enumerate(payloads):
        state = core.evolve(state, wrap(Append("x/1", payload, f"given-{n}"), actor="test", occurred_at_ns=0))
    return state


def settle(state: SearcherState, progress: bool = False) -> tuple[SearcherState, list[Append]]:
    """Decides and folds until nothing more is decided, like the Shell; the
    decisions returned leave out progress announcements unless asked."""
    state, decided = pure_core.settle(core, state, given)
    if not progress:
        decided = [a for a in decided if not isinstance(a.payload, ev.ExperimentProgressChanged)]
    return state, decided


def experiment(
    experiment_id: int = 1, name: str = "single", activate: bool = True, seed: int = 42, **searcher: object
) -> ev.ExperimentCreated:
    config = {
        "searcher": {"name": name, "metric": "loss", **searcher},
        "hyperparameters": HPARAMS,
        "reproducibility": {"experiment_seed": seed},
    }
    return ev.ExperimentCreated(
        experiment_id=experiment_id, config_json=json.dumps(config), activate=activate
    )


def ended(trial_id: int, state: int, experiment_id: int = 1) -> ev.TrialEnded:
    return ev.TrialEnded(trial_id=trial_id, experiment_id=experiment_id, state=state)


def test_single_creates_one_trial() -> None:
    [append] = core.decide(given(experiment()))
    created = append.payload
    assert isinstance(created, ev.TrialCreated)
    assert (append.aggregate, append.msg_id, append.expected_version) == ("trial/1", "trial-created-1-0", 0)
    assert (created.trial_id, created.experiment_id) == (1, 1)
    assert json.loads(created.hparams_json)["lr"] == 0.1
    assert 0 <= created.trial_seed < 2**31 and len(created.request_id) == 36
    assert created.reason == "the single trial"


def test_creation_is_reproducible_and_depends_on_the_seed() -> None:
    first = core.decide(given(experiment(name="random", max_trials=3)))
    again = core.decide(given(experiment(name="random", max_trials=3)))
    other_seed = core.decide(given(experiment(name="random", max_trials=3, seed=7)))
    assert [a.payload for a in first] == [a.payload for a in again]
    assert [a.payload.trial_seed for a in first] != [a.payload.trial_seed for a in other_seed]
    assert len({a.payload.request_id for a in first}) == 3


def test_a_rerun_with_the_same_seed_draws_the_same_trials() -> None:
    _, appends = settle(
        given(experiment(1, name="random", max_trials=2), experiment(2, name="random", max_trials=2))
    )
    first, rerun = [a.payload for a in appends[:2]], [a.payload for a in appends[2:]]
    assert [(t.hparams_json, t.trial_seed) for t in first] == [(t.hparams_json, t.trial_seed) for t in rerun]
    assert [t.trial_id for t in first + rerun] == [1, 2, 3, 4]


def test_grid_runs_every_point_last_first_within_its_concurrency() -> None:
    grid_hparams = {"x": {"type": "int", "minval": 1, "maxval": 3, "count": 3}}
    config = {
        "searcher": {"name": "grid", "metric": "loss", "max_concurrent_trials": 2},
        "hyperparameters": grid_hparams,
        "reproducibility": {"experiment_seed": 1},
    }
    created = ev.ExperimentCreated(experiment_id=1, config_json=json.dumps(config), activate=True)
    state, first = settle(given(created))
    assert [json.loads(a.payload.hparams_json) for a in first] == [{"x": 3}, {"x": 2}]
    assert [a.payload.reason for a in first] == ["grid point 3 of 3", "grid point 2 of 3"]
    state, rest = settle(given(ended(1, ev.TRIAL_STATE_COMPLETED), state=state))
    assert [json.loads(a.payload.hparams_json) for a in rest] == [{"x": 1}]
    assert [a.payload.reason for a in rest] == ["grid point 1 of 3; replaces trial 1 (ended COMPLETED)"]
    _, last = settle(
        given(ended(2, ev.TRIAL_STATE_COMPLETED), ended(3, ev.TRIAL_STATE_COMPLETED), state=state)
    )
    assert [a.payload.state for a in last] == [ev.EXPERIMENT_STATE_COMPLETED]


def test_trial_ids_are_global_across_experiments() -> None:
    state, appends = settle(given(experiment(1), experiment(2, name="random", max_trials=2)))
    assert [(a.payload.experiment_id, a.payload.trial_id) for a in appends] == [(1, 1), (2, 2), (2, 3)]
    state, appends = settle(given(experiment(3), state=state))
    assert [a.aggregate for a in appends] == ["trial/4"]


def test_random_respects_max_concurrent_trials_and_refills_on_exit() -> None:
    state, appends = settle(given(experiment(name="random", max_trials=3, max_concurrent_trials=2)))
    assert [a.msg_id for a in appends] == ["trial-created-1-0", "trial-created-1-1"]
    assert [a.payload.reason for a in appends] == ["random draw 1 of 3", "random draw 2 of 3"]
    state, appends = settle(given(ended(1, TS.TRIAL_STATE_ERROR), state=state))
    assert [a.msg_id for a in appends] == ["trial-created-1-2"]
    assert appends[0].payload.reason == "random draw 3 of 3; replaces trial 1 (ended ERROR)"
    state, appends = settle(given(ended(2, TS.TRIAL_STATE_COMPLETED), state=state))
    assert appends == []
    state, appends = settle(given(ended(3, TS.TRIAL_STATE_ERROR), state=state))
    assert [(a.msg_id, a.payload.state) for a in appends] == [
        ("experiment-ended-1", ES.EXPERIMENT_STATE_COMPLETED)
    ]


def run_to_end(*trial_states: int) -> int:
    state, _ = settle(given(experiment(name="random", max_trials=len(trial_states))))
    for trial_id, trial_state in enumerate(trial_states, start=1):
        state, appends = settle(given(ended(trial_id, trial_state), state=state))
    [append] = appends
    return append.payload.state


def test_shutdown_rule() -> None:
    assert run_to_end(TS.TRIAL_STATE_COMPLETED) == ES.EXPERIMENT_STATE_COMPLETED
    assert run_to_end(TS.TRIAL_STATE_ERROR, TS.TRIAL_STATE_ERROR) == ES.EXPERIMENT_STATE_ERROR
    assert run_to_end(TS.TRIAL_STATE_CANCELED, TS.TRIAL_STATE_CANCELED) == ES.EXPERIMENT_STATE_CANCELED
    assert run_to_end(TS.TRIAL_STATE_ERROR, TS.TRIAL_STATE_CANCELED) == ES.EXPERIMENT_STATE_COMPLETED


def test_kill_without_trials_cancels_at_once() -> None:
    _, appends = settle(given(experiment(activate=False), ev.ExperimentKillRequested(experiment_id=1)))
    assert [(a.msg_id, a.payload.state) for a in appends] == [
        ("experiment-ended-1", ES.EXPERIMENT_STATE_CANCELED)
    ]


def test_kill_waits_for_live_trials_and_creates_no_more() -> None:
    state, _ = settle(given(experiment(name="random", max_trials=4, max_concurrent_trials=2)))
    state, appends = settle(
        given(ev.ExperimentKillRequested(experiment_id=1), ended(1, TS.TRIAL_STATE_CANCELED), state=state)
    )
    assert appends == []
    state, appends = settle(given(ended(2, TS.TRIAL_STATE_COMPLETED), state=state))
    assert [(a.msg_id, a.payload.state) for a in appends] == [
        ("experiment-ended-1", ES.EXPERIMENT_STATE_CANCELED)
    ]


def test_a_paused_experiment_creates_nothing_until_activated() -> None:
    state, appends = settle(given(experiment(activate=False)))
    assert appends == []
    state, appends = settle(
        given(ev.ExperimentStateChanged(experiment_id=1, state=ES.EXPERIMENT_STATE_ACTIVE), state=state)
    )
    assert [a.msg_id for a in appends] == ["trial-created-1-0"]


def test_an_unsupported_searcher_errors_the_experiment() -> None:
    [append] = core.decide(given(experiment(name="bayesian")))
    assert append.payload.state == ES.EXPERIMENT_STATE_ERROR and "bayesian" in append.payload.reason
    [append] = core.decide(given(experiment(name="sync_halving", max_trials=2)))
    assert append.payload.state == ES.EXPERIMENT_STATE_ERROR and "sync_halving" in append.payload.reason


def test_progress_is_announced_in_hundredths() -> None:
    state, _ = settle(given(experiment(name="random", max_trials=4, max_concurrent_trials=1)))
    state, appends = settle(given(ended(1, TS.TRIAL_STATE_COMPLETED), state=state), progress=True)
    [progress] = [a for a in appends if isinstance(a.payload, ev.ExperimentProgressChanged)]
    assert (progress.payload.progress, progress.msg_id) == (0.25, "experiment-progress-1-25")
    assert not [a for a in core.decide(state) if isinstance(a.payload, ev.ExperimentProgressChanged)]


def test_replaying_a_whole_history_decides_nothing_again() -> None:
    history: list[Message] = [experiment(name="random", max_trials=2, max_concurrent_trials=1)]
    state, appends = settle(given(*history))
    history += [a.payload for a in appends]
    for trial_id in (1, 2):
        state, appends = settle(given(ended(trial_id, TS.TRIAL_STATE_COMPLETED), state=state))
        history += [ended(trial_id, TS.TRIAL_STATE_COMPLETED), *[a.payload for a in appends]]
    assert core.decide(given(*history)) == []


def validation(trial_id: int, x: float, batches: int, experiment_id: int = 1) -> ev.TrialValidationReported:
    return ev.TrialValidationReported(
        trial_id=trial_id,
        experiment_id=experiment_id,
        steps_completed=batches,
        metrics_json=json.dumps({"loss": x, "batches": batches}),
    )


def asha(**searcher: object) -> ev.ExperimentCreated:
    fields = {"num_rungs": 2, "divisor": 4, "max_trials": 3, "max_concurrent_trials": 2,
              "time_metric": "batches", "max_time": 16, **searcher}  # fmt: skip
    return experiment(name="async_halving", **fields)


def test_asha_promotes_stops_and_replaces_trials_through_events() -> None:
    state, appends = settle(given(asha()))
    assert [(a.payload.trial_id, a.payload.length) for a in appends] == [(1, 4), (2, 4)]
    # The first trial to reach rung 0 survives it and is told to train to rung 1.
    state, appends = settle(given(validation(1, 0.5, 4), state=state))
    assert [(type(a.payload).__name__, a.msg_id, a.payload.length) for a in appends] == [
        ("TrialLengthSet", "trial-length-1-1", 16)
    ]
    # A worse one is cut there, and a new trial replaces it.
    state, appends = settle(given(validation(2, 0.9, 4), state=state))
    stop, created = appends
    cut = "cut at rung 0 (4 batches): loss 0.9 not in the top 1/4 of 2"
    assert (stop.msg_id, stop.payload.reason, stop.payload.rung) == ("trial-stop-2", cut, 0)
    assert (created.payload.trial_id, created.msg_id) == (3, "trial-created-1-2")
    assert created.payload.reason == f"ASHA: a new trial for rung 0 (4 batches); replaces trial 2 ({cut})"
    # A stopped trial's later validations are not the search's business.
    _, appends = settle(given(validation(2, 0.1, 8), state=state))
    assert appends == []


def test_asha_ignores_a_validation_without_its_metric() -> None:
    state, _ = settle(given(asha()))
    missing = ev.TrialValidationReported(
        trial_id=1, experiment_id=1, steps_completed=4, metrics_json='{"acc": 1}'
    )
    _, appends = settle(given(missing, state=state))
    assert appends == []


def test_asha_ends_once_every_trial_exited() -> None:
    state, _ = settle(given(asha(max_trials=2)))
    state, _ = settle(given(validation(1, 0.5, 4), validation(2, 0.4, 4), state=state))
    state, appends = settle(given(validation(1, 0.5, 16), state=state))
    assert [a.payload.reason for a in appends] == ["reached the top rung (16 batches): loss 0.5"]
    state, appends = settle(given(ended(1, TS.TRIAL_STATE_COMPLETED), state=state))
    assert appends == []
    _, appends = settle(given(ended(2, TS.TRIAL_STATE_COMPLETED), state=state))
    assert [a.payload.state for a in appends] == [ES.EXPERIMENT_STATE_COMPLETED]


def test_replaying_an_asha_history_decides_nothing_again() -> None:
    history: list[Message] = [asha()]
    state, appends = settle(given(*history), progress=True)
    history += [a.payload for a in appends]
    for event in (validation(1, 0.5, 4), validation(2, 0.9, 4), validation(3, 0.1, 4)):
        state, appends = settle(given(event, state=state), progress=True)
        history += [event, *[a.payload for a in appends]]
    assert core.decide(given(*history)) == []


def test_asha_ranks_a_diverged_trial_worst() -> None:
    state, _ = settle(given(asha()))
    state, _ = settle(given(validation(1, 0.5, 4), state=state))
    nan = ev.TrialValidationReported(
        trial_id=2, experiment_id=1, steps_completed=4, metrics_json='{"loss": "NaN", "batches": 4}'
    )
    _, appends = settle(given(nan, state=state))
    assert [a.payload.reason for a in appends if isinstance(a.payload, ev.TrialStopRequested)] == [
        "cut at rung 0 (4 batches): loss nan not in the top 1/4 of 2"
    ]


def test_a_trial_with_invalid_hyperparameters_is_replaced() -> None:
    state, appends = settle(given(experiment(name="random", max_trials=2, max_concurrent_trials=1)))
    assert [a.msg_id for a in appends] == ["trial-created-1-0"]
    early_exit = ev.TrialEarlyExitReported(trial_id=1, experiment_id=1, reason="INVALID_HP")
    state, appends = settle(given(early_exit, ended(1, TS.TRIAL_STATE_COMPLETED), state=state))
    assert [a.msg_id for a in appends] == ["trial-created-1-1"]
    assert appends[0].payload.reason == "random draw 1 of 2; replaces trial 1 (invalid hyperparameters)"
    # It does not count against max_trials: two more trials run in all.
    state, appends = settle(given(ended(2, TS.TRIAL_STATE_COMPLETED), state=state))
    assert [a.msg_id for a in appends] == ["trial-created-1-2"]
