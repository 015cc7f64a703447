"""`adaptive_asha` (Determined's `adaptive_asha.go` and `tournament.go`):
several `async_halving` brackets, from the one that stops trials earliest to
the one that stops them latest, sharing the trial and concurrency budgets.
Each trial's events go to the bracket that asked for it; the progress is the
brackets' mean."""

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from services.searcher.methods.asha import AsyncHalving
from services.searcher.methods.base import Create, Decided, ExitReason, SearchMethod

AdaptiveMode = Literal["aggressive", "standard", "conservative"]


@dataclass(frozen=True)
class BracketShape:
    num_rungs: int
    max_trials: int
    max_concurrent_trials: int


def bracket_shapes(
    *,
    max_time: int,
    max_trials: int,
    divisor: float,
    max_concurrent_trials: int,
    mode: AdaptiveMode,
    max_rungs: int,
    bracket_rungs: Sequence[int],
) -> tuple[BracketShape, ...]:
    """The brackets, most rungs first (most early stopping: the speedups come early)."""
    most = _rungs_cap(max_time, max_trials, divisor, max_rungs)
    rungs = sorted(bracket_rungs or _mode_rungs(mode, most), reverse=True)
    trials = _bracket_trials(max_trials, divisor, rungs)
    concurrency = _bracket_concurrency(max_concurrent_trials, divisor, trials)
    return tuple(BracketShape(*shape) for shape in zip(rungs, trials, concurrency, strict=True))


def _rungs_cap(max_time: int, max_trials: int, divisor: float, max_rungs: int) -> int:
    """No more rungs than max_time or max_trials can divide into. The logs are
    floats as in Determined, so log(1000)/log(10) = 2.999... counts as 2."""
    by_time = int(math.log(max_time) / math.log(divisor)) + 1
    by_trials = int(math.log(max_trials) / math.log(divisor)) + 1
    return min(max_rungs, by_time, by_trials)


def _mode_rungs(mode: AdaptiveMode, most: int) -> list[int]:
    if mode == "conservative":
        return list(range(1, most + 1))
    if mode == "standard":
        return list(range((most - 1) // 2 + 1, most + 1))
    return [most]


def _bracket_trials(max_trials: int, divisor: float, rungs: Sequence[int]) -> list[int]:
    """Shares giving each bracket about the same total training: a bracket of
    n rungs weighs divisor^(n-1)/n. At least one trial each; what rounding
    leaves over goes to the first bracket."""
    weights = [divisor ** (count - 1) / count for count in rungs]
    total = sum(weights)
    trials = [max(int(weight / total * max_trials), 1) for weight in weights]
    trials[0] += max(max_trials - sum(trials), 0)
    return trials


def _bracket_concurrency(max_concurrent_trials: int, divisor: float, trials: Sequence[int]) -> list[int]:
    """An even split of the cap (at least one per bracket), the first brackets
    taking the remainder; with no cap, each as many as the last bracket's
    trials (at least divisor)."""
    if max_concurrent_trials == 0:
        return [max(trials[-1], int(divisor))] * len(trials)
    share, extra = divmod(max(max_concurrent_trials, len(trials)), len(trials))
    return [share + (1 if index < extra else 0) for index in range(len(trials))]


@dataclass(frozen=True)
class AdaptiveASHA:
    """Build one with `AdaptiveASHA.new`. Bracket i's Creates carry bracket=i."""

    brackets: tuple[SearchMethod, ...]
    # request -> the bracket that asked for it
    bracket_of: Mapping[int, int] = field(default_factory=dict)

    @classmethod
    def new(
        cls,
        *,
        metric: str,
        smaller_is_better: bool,
        time_metric: str,
        max_time: int,
        max_trials: int,
        divisor: float,
        max_concurrent_trials: int,
        mode: AdaptiveMode,
        max_rungs: int,
        bracket_rungs: Sequence[int],
        time_from_steps: bool = False,
    ) -> "AdaptiveASHA":
        shapes = bracket_shapes(
            max_time=max_time,
            max_trials=max_trials,
            divisor=divisor,
            max_concurrent_trials=max_concurrent_trials,
            mode=mode,
            max_rungs=max_rungs,
            bracket_rungs=bracket_rungs,
        )
        brackets = tuple(
            AsyncHalving.new(
                metric=metric,
                smaller_is_better=smaller_is_better,
                time_metric=time_metric,
                max_time=max_time,
                num_rungs=shape.num_rungs,
                divisor=divisor,
                max_trials=shape.max_trials,
                max_concurrent_trials=shape.max_concurrent_trials,
                time_from_steps=time_from_steps,
                bracket=index,
                label=f"adaptive ASHA bracket {index}",
            )
            for index, shape in enumerate(shapes)
        )
        return cls(brackets)

    def initial_trials(self) -> Decided:
        decided = [bracket.initial_trials() for bracket in self.brackets]
        brackets = tuple(each.method for each in decided)
        return Decided(replace(self, brackets=brackets), tuple(a for each in decided for a in each.actions))

    def trial_created(self, request: int, create: Create) -> "AdaptiveASHA":
        bracket = self.brackets[create.bracket].trial_created(request, create)
        return replace(
            self,
            brackets=self._with_bracket(create.bracket, bracket),
            bracket_of={**self.bracket_of, request: create.bracket},
        )

    def validation_reported(self, request: int, metrics: Mapping[str, Any], steps_completed: int) -> Decided:
        index = self.bracket_of[request]
        return self._routed(
            index, self.brackets[index].validation_reported(request, metrics, steps_completed)
        )

    def trial_exited_early(self, request: int, reason: ExitReason) -> Decided:
        index = self.bracket_of[request]
        return self._routed(index, self.brackets[index].trial_exited_early(request, reason))

    def trial_exited(self, request: int) -> Decided:
        index = self.bracket_of[request]
        return self._routed(index, self.brackets[index].trial_exited(request))

    def progress(self) -> float:
        return sum(bracket.progress() for bracket in self.brackets) / len(self.brackets)

    def _routed(self, index: int, decided: Decided) -> Decided:
        return Decided(replace(self, brackets=self._with_bracket(index, decided.method)), decided.actions)

    def _with_bracket(self, index: int, bracket: SearchMethod) -> tuple[SearchMethod, ...]:
        return self.brackets[:index] + (bracket,) + self.brackets[index + 1 :]
