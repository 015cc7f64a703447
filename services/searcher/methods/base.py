"""The interface every search method implements.

A search method is an immutable value. Each hook takes the event the searcher
core folded and returns the method's next value and the actions it decides,
so the same events in the same order always give the same decisions (that is
how a restarted searcher rebuilds its state: by replaying them).

Trials are named by their *request*: 0, 1, 2, ... in the order the method's
Create actions were turned into trials. The core numbers the Creates of one
hook's answer in list order and tells the method each number through
`trial_created` before delivering any other event of that trial.

Hooks (Determined's `SearchMethod`):
- `initial_trials()`: once, when the experiment starts.
- `trial_created(request, create)`: the Create became trial `request`.
- `validation_reported(request, metrics, steps_completed)`: every validation
  of a live trial the searcher has not stopped. ASHA reads its time metric
  from `metrics`; a seed-era config (`max_length: {batches: N}`, no
  time_metric) reads `steps_completed` when the report has no "batches".
- `trial_exited_early(request, reason)`: the trial ended ERROR or CANCELED
  (or an invalid hyperparameter), before `trial_exited`.
- `trial_exited(request)`: the trial reached a terminal state.
- `progress()`: the search's progress in [0, 1].

The search is over when every requested trial has exited and the last hook
asked for nothing more: the core decides the experiment's end.
"""

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, Self


class SearcherMetricError(ValueError):
    """A validation lacks the searcher's metric (or ASHA's time metric), or it
    is not a number. The message names the metric and what was reported."""


class ExitReason(enum.Enum):
    ERRORED = "ERRORED"
    USER_CANCELED = "USER_CANCELED"
    INVALID_HP = "INVALID_HP"


@dataclass(frozen=True)
class Create:
    """Create one trial. `hparams` None = the core samples them from the
    experiment's seeded RNG; `length` = how far it should train at first in
    the searcher's time unit (0 = the config's length); `bracket` lets a
    method that combines others (adaptive ASHA) route the trial's events.
    `reason` says what the method did, for people ("random draw 3 of 8"; the
    core adds which trial it replaces): words, not part of the decision."""

    hparams: Mapping[str, Any] | None = None
    length: int = 0
    bracket: int = 0
    reason: str = field(default="", compare=False)


@dataclass(frozen=True)
class Stop:
    """The search is done with trial `request`: it stops (and ends COMPLETED)."""

    request: int
    reason: str
    rung: int = -1


@dataclass(frozen=True)
class SetLength:
    """Trial `request` passed rung `rung - 1`: train it up to `length` now."""

    request: int
    rung: int
    length: int


Action = Create | Stop | SetLength


@dataclass(frozen=True)
class Decided:
    """What a hook returns: the method's next value and its actions."""

    method: "SearchMethod"
    actions: tuple[Action, ...] = field(default_factory=tuple)


class SearchMethod(Protocol):
    def initial_trials(self) -> Decided: ...

    def trial_created(self, request: int, create: Create) -> Self: ...

    def validation_reported(
        self, request: int, metrics: Mapping[str, Any], steps_completed: int
    ) -> Decided: ...

    def trial_exited_early(self, request: int, reason: ExitReason) -> Decided: ...

    def trial_exited(self, request: int) -> Decided: ...

    def progress(self) -> float: ...
