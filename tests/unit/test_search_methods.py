"""Search methods as pure values: hand-worked cases from Determined's
behaviour (DETERMINED-COMPAT.md §2.3-2.7), then properties of any run."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from determined.common.expconf import ExperimentConfig, load_config
from services.searcher.methods.adaptive import AdaptiveASHA, BracketShape, bracket_shapes
from services.searcher.methods.asha import AsyncHalving, rung_units
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
from services.searcher.methods.grid import GridSearch
from services.searcher.methods.random import RandomSearch

GRID_HPARAMS = {
    "a": {"type": "int", "minval": 0, "maxval": 2, "count": 3},
    "b": {"type": "categorical", "vals": [10, 20]},
}


@dataclass
class Driver:
    """Plays the searcher core: numbers the Creates in order (telling the
    method through trial_created) and remembers which trials were stopped
    and which exited."""

    method: SearchMethod
    creates: list[Create] = field(default_factory=list)
    stopped: set[int] = field(default_factory=set)
    exited: set[int] = field(default_factory=set)
    log: list[Action] = field(default_factory=list)

    def apply(self, decided: Decided) -> tuple[Action, ...]:
        self.method = decided.method
        for action in decided.actions:
            if isinstance(action, Create):
                self.method = self.method.trial_created(len(self.creates), action)
                self.creates.append(action)
            elif isinstance(action, Stop):
                self.stopped.add(action.request)
        self.log += decided.actions
        return decided.actions

    def start(self) -> tuple[Action, ...]:
        return self.apply(self.method.initial_trials())

    def validate(self, request: int, steps_completed: int = 0, **metrics: Any) -> tuple[Action, ...]:
        return self.apply(self.method.validation_reported(request, metrics, steps_completed))

    def end(self, request: int, reason: ExitReason | None = None) -> tuple[Action, ...]:
        self.exited.add(request)
        early = self.apply(self.method.trial_exited_early(request, reason)) if reason else ()
        return early + self.apply(self.method.trial_exited(request))

    @property
    def searching(self) -> list[int]:
        """Trials created, not exited, not stopped (a stopped trial is
        replaced at once, while it winds down)."""
        return [r for r in range(len(self.creates)) if r not in self.exited | self.stopped]

    @property
    def alive(self) -> list[int]:
        return [r for r in range(len(self.creates)) if r not in self.exited]


def config(new_experiment: bool = True, **searcher: Any) -> ExperimentConfig:
    return load_config(
        {
            "entrypoint": "python3 train.py",
            "searcher": {"metric": "loss", **searcher},
            "hyperparameters": GRID_HPARAMS,
        },
        new_experiment=new_experiment,
    )


GRID_TYPED = config(name="grid").hyperparameters  # what the grid searcher is built with


def asha(**changes: Any) -> AsyncHalving:
    """Rungs at 2, 4 and 8 batches, divisor 2, 10 trials, 3 at a time."""
    params: dict[str, Any] = {
        "metric": "loss",
        "smaller_is_better": True,
        "time_metric": "batches",
        "max_time": 8,
        "num_rungs": 3,
        "divisor": 2.0,
        "max_trials": 10,
        "max_concurrent_trials": 3,
    }
    return AsyncHalving.new(**{**params, **changes})


def shapes(method: SearchMethod) -> list[tuple[int, int, int]]:
    assert isinstance(method, AdaptiveASHA)
    brackets = [b for b in method.brackets if isinstance(b, AsyncHalving)]
    return [(len(b.rungs), b.max_trials, b.max_concurrent_trials) for b in brackets]


# -- adaptive ASHA: brackets ------------------------------------------------------


def test_the_worked_example_has_two_brackets_and_starts_twelve_trials() -> None:
    method = search_method(config(name="adaptive_asha", max_trials=16, time_metric="batches", max_time=937))
    assert shapes(method) == [(3, 12, 8), (2, 4, 8)]
    assert isinstance(method, AdaptiveASHA)
    assert [[r.units_needed for r in b.rungs] for b in method.brackets if isinstance(b, AsyncHalving)] == [
        [58, 234, 937],
        [234, 937],
    ]
    creates = Driver(method).start()
    assert creates == (Create(length=58, bracket=0),) * 8 + (Create(length=234, bracket=1),) * 4


def test_the_worked_example_in_aggressive_mode_starts_all_sixteen() -> None:
    method = search_method(
        config(name="adaptive_asha", max_trials=16, time_metric="batches", max_time=937, mode="aggressive")
    )
    assert shapes(method) == [(3, 16, 16)]
    assert len(Driver(method).start()) == 16


def test_the_worked_example_in_conservative_mode() -> None:
    method = search_method(
        config(name="adaptive_asha", max_trials=16, time_metric="batches", max_time=937, mode="conservative")
    )
    assert shapes(method) == [(3, 12, 6), (2, 3, 5), (1, 1, 5)]
    assert len(Driver(method).start()) == 10


def test_max_trials_10_max_time_100_standard_two_at_a_time() -> None:
    assert bracket_shapes(
        max_time=100,
        max_trials=10,
        divisor=4.0,
        max_concurrent_trials=2,
        mode="standard",
        max_rungs=5,
        bracket_rungs=[],
    ) == (BracketShape(2, 7, 1), BracketShape(1, 3, 1))


def test_rung_count_uses_float_logs_like_determined() -> None:
    """log(1000)/log(10) is 2.999... in floats: 3 rungs, not 4."""
    [shape] = bracket_shapes(
        max_time=1000,
        max_trials=10000,
        divisor=10.0,
        max_concurrent_trials=0,
        mode="aggressive",
        max_rungs=5,
        bracket_rungs=[],
    )
    assert shape == BracketShape(3, 10000, 10000)


def test_no_concurrency_cap_gives_each_bracket_the_last_brackets_trials() -> None:
    method = search_method(
        config(
            name="adaptive_asha", max_trials=16, time_metric="batches", max_time=937, max_concurrent_trials=0
        )
    )
    assert shapes(method) == [(3, 12, 4), (2, 4, 4)]
    assert len(Driver(method).start()) == 8


def test_bracket_rungs_are_taken_as_given_most_rungs_first() -> None:
    method = search_method(
        config(name="adaptive_asha", max_trials=20, time_metric="batches", max_time=64, bracket_rungs=[1, 3])
    )
    assert [rungs for rungs, _, _ in shapes(method)] == [3, 1]


def test_events_go_to_the_bracket_that_asked_for_the_trial() -> None:
    driver = Driver(
        search_method(config(name="adaptive_asha", max_trials=16, time_metric="batches", max_time=937))
    )
    driver.start()
    # Request 8 is bracket 1's first trial: its first rung is at 234 batches.
    assert driver.validate(8, loss=1.0, batches=100) == ()
    assert driver.validate(8, loss=1.0, batches=234) == (SetLength(8, 1, 937),)
    assert driver.validate(0, loss=1.0, batches=58) == (SetLength(0, 1, 234),)
    assert driver.validate(1, loss=2.0, batches=58) == (
        Stop(1, "cut at rung 0 (58 batches): loss 2 not in the top 1/4 of 2", 0),
        Create(length=58, bracket=0),
    )
    assert [c.reason for c in driver.creates[7:9]] == [
        "adaptive ASHA bracket 0: a new trial for rung 0 (58 batches)",
        "adaptive ASHA bracket 1: a new trial for rung 0 (234 batches)",
    ]


# -- async_halving ----------------------------------------------------------------


def test_rungs_divide_max_time_by_powers_of_the_divisor() -> None:
    assert rung_units(937, 4.0, 3) == (58, 234, 937)
    assert rung_units(100, 4.0, 5) == (1, 1, 6, 25, 100)
    assert rung_units(8, 2.0, 1) == (8,)


def test_initial_trials_fill_the_concurrency_or_reach_the_top() -> None:
    assert len(Driver(asha(max_concurrent_trials=3)).start()) == 3
    assert len(Driver(asha(max_concurrent_trials=30)).start()) == 10
    # no cap: divisor^(rungs-1) = 4, clamped to [1, max_trials]
    assert len(Driver(asha(max_concurrent_trials=0)).start()) == 4
    assert len(Driver(asha(max_concurrent_trials=0, max_trials=3)).start()) == 3
    assert Driver(asha()).start()[0] == Create(length=2, bracket=0)


def test_the_first_to_reach_a_rung_survives_then_the_top_half() -> None:
    driver = Driver(asha())
    driver.start()
    assert driver.validate(0, loss=0.5, batches=2) == (SetLength(0, 1, 4),)
    # 2 at rung 0: keep 1, and 0.6 is second
    assert driver.validate(1, loss=0.6, batches=2) == (
        Stop(1, "cut at rung 0 (2 batches): loss 0.6 not in the top 1/2 of 2", 0),
        Create(length=2, bracket=0),
    )
    # 3 at rung 0: keep 1, and 0.4 is best
    assert driver.validate(2, loss=0.4, batches=2) == (SetLength(2, 1, 4),)
    # 4 at rung 0: keep 2, and 0.45 is second
    assert driver.validate(3, loss=0.45, batches=2) == (SetLength(3, 1, 4),)
    # at rung 1 the first survives, the second (worse) is cut
    assert driver.validate(2, loss=0.3, batches=4) == (SetLength(2, 2, 8),)
    assert driver.validate(0, loss=0.35, batches=5)[0] == Stop(
        0, "cut at rung 1 (4 batches): loss 0.35 not in the top 1/2 of 2", 1
    )
    assert driver.validate(2, loss=0.2, batches=8)[0] == Stop(
        2, "reached the top rung (8 batches): loss 0.2", 2
    )


def test_an_equal_metric_ranks_before_the_earlier_one() -> None:
    driver = Driver(asha())
    driver.start()
    driver.validate(0, loss=0.5, batches=2)
    assert driver.validate(1, loss=0.5, batches=2) == (SetLength(1, 1, 4),)


def test_larger_is_better_when_asked() -> None:
    driver = Driver(asha(metric="accuracy", smaller_is_better=False))
    driver.start()
    driver.validate(0, accuracy=0.5, batches=2)
    assert driver.validate(1, accuracy=0.6, batches=2) == (SetLength(1, 1, 4),)
    assert driver.validate(2, accuracy=0.1, batches=2)[0] == Stop(
        2, "cut at rung 0 (2 batches): accuracy 0.1 not in the top 1/2 of 3", 0
    )


def test_a_nan_metric_ranks_worst() -> None:
    driver = Driver(asha())
    driver.start()
    driver.validate(0, loss=0.5, batches=2)
    assert isinstance(driver.validate(1, loss=math.nan, batches=2)[0], Stop)


def test_one_report_can_pass_every_rung() -> None:
    driver = Driver(asha())
    driver.start()
    assert driver.validate(0, loss=0.5, batches=100) == (
        SetLength(0, 1, 4),
        SetLength(0, 2, 8),
        Stop(0, "reached the top rung (8 batches): loss 0.5", 2),
        Create(length=2, bracket=0),
    )


def test_a_report_short_of_rung_0_and_reports_of_stopped_trials_decide_nothing() -> None:
    driver = Driver(asha())
    driver.start()
    before = driver.method
    assert driver.validate(0, loss=0.5, batches=1) == ()
    assert driver.method == before
    driver.validate(0, loss=0.5, batches=2)
    driver.validate(1, loss=0.9, batches=2)  # cut
    assert 1 in driver.stopped
    assert driver.validate(1, loss=0.1, batches=4) == ()
    driver.end(2)
    assert driver.validate(2, loss=0.1, batches=4) == ()


def test_stopped_trials_are_replaced_until_max_trials_were_requested() -> None:
    driver = Driver(asha(max_trials=3, max_concurrent_trials=2))
    driver.start()
    driver.validate(0, loss=0.5, batches=2)
    assert driver.validate(1, loss=0.9, batches=2)[-1] == Create(length=2, bracket=0)
    assert driver.validate(2, loss=0.9, batches=2) == (
        Stop(2, "cut at rung 0 (2 batches): loss 0.9 not in the top 1/2 of 3", 0),
    )
    assert len(driver.creates) == 3


def test_a_trial_that_simply_ends_is_not_replaced() -> None:
    driver = Driver(asha())
    driver.start()
    assert driver.end(0) == ()


def test_an_errored_trial_ranks_worst_and_is_replaced() -> None:
    driver = Driver(asha())
    driver.start()
    assert driver.end(0, ExitReason.ERRORED) == (Create(length=2, bracket=0),)
    # rung 0 holds the errored trial: the next one beats it and survives
    assert driver.validate(1, loss=99.0, batches=2) == (SetLength(1, 1, 4),)
    assert driver.end(2, ExitReason.USER_CANCELED) == (Create(length=2, bracket=0),)


def test_an_invalid_trial_is_forgotten_and_always_replaced() -> None:
    driver = Driver(asha(max_trials=1, max_concurrent_trials=1))
    driver.start()
    driver.validate(0, loss=0.1, batches=2)
    assert driver.end(0, ExitReason.INVALID_HP) == (
        Stop(0, "invalid hyperparameters"),
        Create(length=2, bracket=0),
    )
    # its metric left rung 0: the replacement is the first there again
    assert driver.validate(1, loss=0.9, batches=2) == (SetLength(1, 1, 4),)


def test_an_early_exit_of_a_stopped_trial_decides_nothing() -> None:
    driver = Driver(asha())
    driver.start()
    driver.validate(0, loss=0.5, batches=2)
    driver.validate(1, loss=0.9, batches=2)  # cut and replaced
    assert driver.end(1, ExitReason.ERRORED) == ()


def test_progress_counts_trials_at_rung_0_then_ended_trials() -> None:
    driver = Driver(asha(max_trials=2, max_concurrent_trials=2))
    driver.start()
    assert driver.method.progress() == 0.0
    driver.validate(0, loss=0.5, batches=2)
    assert driver.method.progress() == pytest.approx(1 / 2.4)
    driver.validate(1, loss=0.4, batches=8)
    driver.end(1)
    assert driver.method.progress() == pytest.approx(2 / 2.4)
    driver.end(0)
    assert driver.method.progress() == 1.0


@pytest.mark.parametrize(
    ("metrics", "words"),
    [
        ({"accuracy": 0.5, "batches": 2}, ["'loss'", "accuracy, batches"]),
        ({"loss": "0.5", "batches": 2}, ["'loss'", "'0.5'", "number"]),
        ({"loss": True, "batches": 2}, ["'loss'", "True"]),
        ({"loss": 0.5}, ["time metric 'batches'", "reported: loss"]),
        ({"loss": 0.5, "batches": None}, ["'batches'", "None"]),
        ({"loss": 0.5, "batches": math.inf}, ["'batches'", "finite"]),
    ],
)
def test_a_report_without_a_usable_metric_is_an_error_naming_it(
    metrics: dict[str, Any], words: list[str]
) -> None:
    driver = Driver(asha())
    driver.start()
    with pytest.raises(SearcherMetricError) as raised:
        driver.method.validation_reported(0, metrics, 2)
    assert all(word in str(raised.value) for word in words), str(raised.value)


def test_time_from_steps_reads_steps_completed_when_the_time_metric_is_absent() -> None:
    driver = Driver(asha(time_from_steps=True))
    driver.start()
    assert driver.validate(0, steps_completed=2, loss=0.5) == (SetLength(0, 1, 4),)
    # a reported time metric still wins
    assert driver.validate(0, steps_completed=100, loss=0.5, batches=3) == ()


# -- factory ----------------------------------------------------------------------


def test_seed_era_max_length_sets_the_time_metric() -> None:
    for max_length in ({"batches": 937}, 937):
        method = search_method(
            config(
                new_experiment=False, name="async_halving", num_rungs=3, max_trials=4, max_length=max_length
            )
        )
        assert isinstance(method, AsyncHalving)
        assert (method.time_metric, method.time_from_steps) == ("batches", True)
        assert [r.units_needed for r in method.rungs] == [58, 234, 937]
    records = search_method(
        config(
            new_experiment=False, name="async_halving", num_rungs=2, max_trials=4, max_length={"records": 64}
        )
    )
    assert isinstance(records, AsyncHalving)
    assert (records.time_metric, records.time_from_steps) == ("records", False)


def test_asha_with_time_metric_takes_the_config_defaults() -> None:
    method = search_method(
        config(name="async_halving", num_rungs=2, max_trials=4, time_metric="batches", max_time=8)
    )
    assert isinstance(method, AsyncHalving)
    assert (method.divisor, method.max_concurrent_trials, method.time_from_steps) == (4.0, 16, False)


@pytest.mark.parametrize("name", ["custom", "adaptive", "adaptive_simple", "sync_halving"])
def test_removed_searchers_are_unsupported(name: str) -> None:
    with pytest.raises(UnsupportedSearcherError, match=name):
        search_method(config(new_experiment=False, name=name))


def test_single_random_and_grid_from_the_config() -> None:
    assert search_method(config(name="single")) == RandomSearch(
        max_trials=1, max_concurrent_trials=1, single=True
    )
    assert search_method(config(name="random", max_trials=40)) == RandomSearch(
        max_trials=40, max_concurrent_trials=16
    )
    assert search_method(config(name="grid", max_concurrent_trials=0)) == GridSearch(
        hyperparameters=GRID_TYPED, max_concurrent_trials=0
    )


# -- random, single, grid ---------------------------------------------------------


def test_random_keeps_max_concurrent_trials_going_until_max_trials() -> None:
    driver = Driver(RandomSearch(max_trials=3, max_concurrent_trials=2))
    assert driver.start() == (Create(), Create())
    assert driver.validate(0, loss=0.1) == ()
    assert driver.end(0) == (Create(),)
    assert driver.end(1) == ()
    assert driver.method.progress() == pytest.approx(2 / 3)
    assert driver.end(2) == ()
    assert driver.method.progress() == 1.0


def test_creates_say_what_the_method_did() -> None:
    assert [c.reason for c in Driver(RandomSearch(max_trials=3, max_concurrent_trials=0)).start()] == [
        "random draw 1 of 3",
        "random draw 2 of 3",
        "random draw 3 of 3",
    ]
    assert [c.reason for c in Driver(search_method(config(name="single"))).start()] == ["the single trial"]
    grid = Driver(GridSearch(hyperparameters=GRID_TYPED, max_concurrent_trials=2)).start()
    assert [c.reason for c in grid] == ["grid point 6 of 6", "grid point 5 of 6"]
    assert {c.reason for c in Driver(asha()).start()} == {"ASHA: a new trial for rung 0 (2 batches)"}


def test_random_without_a_cap_starts_every_trial() -> None:
    assert len(Driver(RandomSearch(max_trials=5, max_concurrent_trials=0)).start()) == 5


def test_random_replaces_an_invalid_trial_but_single_does_not() -> None:
    driver = Driver(RandomSearch(max_trials=1, max_concurrent_trials=1))
    driver.start()
    assert driver.end(0, ExitReason.INVALID_HP) == (Create(),)
    assert driver.end(1, ExitReason.ERRORED) == ()
    single = Driver(search_method(config(name="single")))
    assert single.start() == (Create(),)
    assert single.end(0, ExitReason.INVALID_HP) == ()
    assert single.method.progress() == 1.0


def test_grid_runs_the_last_point_first_a_few_at_a_time() -> None:
    driver = Driver(GridSearch(hyperparameters=GRID_TYPED, max_concurrent_trials=4))
    assert [c.hparams for c in driver.start() if isinstance(c, Create)] == [
        {"a": 2, "b": 20},
        {"a": 2, "b": 10},
        {"a": 1, "b": 20},
        {"a": 1, "b": 10},
    ]
    assert [c.hparams for c in driver.end(0, ExitReason.ERRORED) if isinstance(c, Create)] == [
        {"a": 0, "b": 20}
    ]
    assert [c.hparams for c in driver.end(1) if isinstance(c, Create)] == [{"a": 0, "b": 10}]
    assert driver.end(2) == ()
    assert driver.method.progress() == pytest.approx(3 / 6)


# -- properties of any run --------------------------------------------------------

KINDS = ("validate", "validate", "validate", "exit", "errored", "canceled", "invalid")
REASONS = {
    "errored": ExitReason.ERRORED,
    "canceled": ExitReason.USER_CANCELED,
    "invalid": ExitReason.INVALID_HP,
}
Step = tuple[str, int, float, int]


@dataclass(frozen=True)
class Case:
    method: SearchMethod
    budget: int  # trials it may request, invalid ones aside
    cap: int  # trials it may search at once (0 = no cap)


@st.composite
def cases(draw: st.DrawFn) -> Case:
    max_trials = draw(st.integers(1, 12))
    concurrency = draw(st.integers(0, 5))
    divisor = draw(st.sampled_from([2.0, 2.5, 3.0, 4.0]))
    max_time = draw(st.integers(1, 40))
    kind = draw(st.sampled_from(["random", "grid", "async_halving", "adaptive_asha"]))
    if kind == "random":
        return Case(
            RandomSearch(max_trials=max_trials, max_concurrent_trials=concurrency), max_trials, concurrency
        )
    if kind == "grid":
        return Case(GridSearch(hyperparameters=GRID_TYPED, max_concurrent_trials=concurrency), 6, concurrency)
    common: dict[str, Any] = {
        "metric": "loss",
        "smaller_is_better": draw(st.booleans()),
        "time_metric": "batches",
        "max_time": max_time,
        "divisor": divisor,
        "max_trials": max_trials,
        "max_concurrent_trials": concurrency,
    }
    if kind == "async_halving":
        return Case(AsyncHalving.new(num_rungs=draw(st.integers(1, 4)), **common), max_trials, concurrency)
    adaptive: dict[str, Any] = {
        "mode": draw(st.sampled_from(["aggressive", "standard", "conservative"])),
        "max_rungs": draw(st.integers(1, 5)),
        "bracket_rungs": draw(st.lists(st.integers(1, 4), max_size=3)),
    }
    method = AdaptiveASHA.new(**common, **adaptive)
    brackets = bracket_shapes(**{k: v for k, v in common.items() if k in BRACKET_ARGS}, **adaptive)
    # Like Determined, every bracket gets at least one trial and one slot.
    budget = sum(b.max_trials for b in brackets)
    return Case(method, budget, sum(b.max_concurrent_trials for b in brackets) if concurrency else 0)


BRACKET_ARGS = ("max_time", "max_trials", "divisor", "max_concurrent_trials")
steps = st.lists(
    st.tuples(
        st.sampled_from(KINDS),
        st.integers(0, 1000),
        st.one_of(st.floats(-10, 10), st.just(math.nan)),
        st.integers(0, 45),
    ),
    max_size=60,
)


def simulate(case: Case, plan: list[Step]) -> Driver:
    """Plays the plan on trials still alive, then ends every trial left
    (stopped ones too) until none is alive; checks the bounds on the way."""
    driver, invalid = Driver(case.method), 0
    driver.start()
    for kind, pick, loss, batches in plan:
        if not driver.alive:
            break
        request = driver.alive[pick % len(driver.alive)]
        if kind == "validate":
            driver.validate(request, loss=loss, batches=batches)
        else:
            invalid += kind == "invalid"
            driver.end(request, REASONS.get(kind))
        check_bounds(case, driver, invalid)
    for _ in range(10 * (case.budget + invalid) + 10):
        if not driver.alive:
            break
        driver.end(driver.alive[0])
        check_bounds(case, driver, invalid)
    assert not driver.alive, "the search never ran out of trials"
    return driver


def check_bounds(case: Case, driver: Driver, invalid: int) -> None:
    assert len(driver.creates) <= case.budget + invalid
    if case.cap:
        assert len(driver.searching) <= case.cap


@settings(max_examples=300, deadline=None)
@given(cases(), steps)
def test_any_run_stays_in_budget_and_ends(case: Case, plan: list[Step]) -> None:
    simulate(case, plan)


@settings(max_examples=100, deadline=None)
@given(cases(), steps)
def test_the_same_events_give_the_same_actions(case: Case, plan: list[Step]) -> None:
    first, again = simulate(case, plan), simulate(case, plan)
    assert first.log == again.log
    assert first.method == again.method


@settings(max_examples=100, deadline=None)
@given(cases(), steps)
def test_a_stopped_or_exited_trial_decides_nothing_more(case: Case, plan: list[Step]) -> None:
    driver = simulate(case, plan)
    before = driver.method
    for request in sorted(driver.stopped | driver.exited):
        assert driver.validate(request, loss=0.0, batches=1000) == ()
    assert driver.method == before
