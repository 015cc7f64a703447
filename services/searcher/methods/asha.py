"""`async_halving`: asynchronous successive halving that stops trials rather
than promoting them (Determined 0.38's `asha_stopping.go`).

A trial reaches rung i once its time metric gets to `units_needed[i]`; it
goes on only while it is in the top 1/divisor of the trials that reached
that rung so far, and a stopped trial is replaced while fewer than
max_trials were requested, so the number of trials searched at once stays
what `initial_trials` started.

Deliberate differences from Determined:
- a trial the search is done with (stopped, or exited) is ignored: its later
  validations and early exit decide nothing (Determined re-ranked them,
  giving duplicate rung entries and extra trials);
- passing rung r announces the next target: `SetLength(request, r + 1, ...)`;
- a Stop says why, in words, with the numbers ("cut at rung 0 (58 batches):
  loss 0.81 not in the top 1/4 of 8"), and a Create what it is for.
"""

import bisect
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from numbers import Real
from typing import Any

from services.common.reasons import number
from services.searcher.methods.base import (
    Action,
    Create,
    Decided,
    ExitReason,
    SearcherMetricError,
    SetLength,
    Stop,
)


@dataclass(frozen=True)
class Rung:
    """The trials that reached this rung, best first, as (request, value)
    with smaller values better."""

    units_needed: int
    metrics: tuple[tuple[int, float], ...] = ()

    def inserted(self, request: int, value: float) -> tuple["Rung", int]:
        """This rung with the trial ranked in, and its position (0 = best).
        A value equal to others ranks before them."""
        position = bisect.bisect_left(self.metrics, value, key=lambda entry: entry[1])
        metrics = self.metrics[:position] + ((request, value),) + self.metrics[position:]
        return replace(self, metrics=metrics), position

    def without(self, request: int) -> "Rung":
        return replace(self, metrics=tuple(entry for entry in self.metrics if entry[0] != request))

    def kept(self, divisor: float) -> int:
        """How many of the best go on: the top 1/divisor, at least one."""
        return max(int(len(self.metrics) / divisor), 1)


def rung_units(max_time: int, divisor: float, num_rungs: int) -> tuple[int, ...]:
    """`units_needed` of each rung: max_time / divisor^(rungs above it), at least 1."""
    return tuple(max(int(max_time / divisor ** (num_rungs - 1 - rung)), 1) for rung in range(num_rungs))


@dataclass(frozen=True, kw_only=True)
class AsyncHalving:
    """Build one with `AsyncHalving.new`. `bracket` is stamped on its Creates
    (adaptive ASHA routes by it); `time_from_steps` reads a validation's
    `steps_completed` when it lacks the time metric (seed-era configs
    whose `max_length` counts batches); `label` names the method in the
    reasons of its Creates."""

    metric: str
    smaller_is_better: bool
    time_metric: str
    divisor: float
    max_trials: int
    max_concurrent_trials: int
    time_from_steps: bool
    bracket: int
    rungs: tuple[Rung, ...]
    label: str = "ASHA"
    # request -> the rung it is heading for (or was stopped at)
    trial_rungs: Mapping[int, int] = field(default_factory=dict)
    # Trials the search is done with: stopped by it, or exited.
    done: frozenset[int] = frozenset()
    requested: int = 0
    invalid_trials: int = 0
    trials_completed: int = 0

    @classmethod
    def new(
        cls,
        *,
        metric: str,
        smaller_is_better: bool,
        time_metric: str,
        max_time: int,
        num_rungs: int,
        divisor: float,
        max_trials: int,
        max_concurrent_trials: int,
        time_from_steps: bool = False,
        bracket: int = 0,
        label: str = "ASHA",
    ) -> "AsyncHalving":
        return cls(
            metric=metric,
            smaller_is_better=smaller_is_better,
            time_metric=time_metric,
            divisor=divisor,
            max_trials=max_trials,
            max_concurrent_trials=max_concurrent_trials,
            time_from_steps=time_from_steps,
            bracket=bracket,
            rungs=tuple(Rung(units) for units in rung_units(max_time, divisor, num_rungs)),
            label=label,
        )

    def initial_trials(self) -> Decided:
        """max_concurrent_trials at once; with no cap, enough that one trial
        can be expected to reach the top rung (divisor^(rungs-1))."""
        if self.max_concurrent_trials > 0:
            return self._creating(min(self.max_concurrent_trials, self.max_trials), ())
        enough = int(self.divisor ** (len(self.rungs) - 1))
        return self._creating(max(1, min(enough, self.max_trials)), ())

    def trial_created(self, request: int, create: Create) -> "AsyncHalving":
        return replace(self, trial_rungs={**self.trial_rungs, request: 0})

    def validation_reported(self, request: int, metrics: Mapping[str, Any], steps_completed: int) -> Decided:
        if request in self.done:
            return Decided(self)
        value = self._metric_value(metrics)
        time = self._time_value(metrics, steps_completed)
        method, actions = self._climbed(request, value, time, metrics[self.metric])
        if not any(isinstance(action, Stop) for action in actions):
            return Decided(method, actions)
        return replace(method, done=method.done | {request})._replacing(actions)

    def trial_exited_early(self, request: int, reason: ExitReason) -> Decided:
        """Invalid hyperparameters: the trial is forgotten and always replaced.
        Otherwise it ranks worst at the rung it was heading for."""
        if request in self.done:
            return Decided(self)
        rung = self.trial_rungs[request]
        method = replace(self, done=self.done | {request})
        if reason is ExitReason.INVALID_HP:
            rungs = tuple(r.without(request) if index <= rung else r for index, r in enumerate(self.rungs))
            method = replace(method, rungs=rungs, invalid_trials=self.invalid_trials + 1)
            return method._creating(1, (Stop(request, "invalid hyperparameters"),))
        worst, _ = self.rungs[rung].inserted(request, math.inf)
        return replace(method, rungs=self._with_rung(rung, worst))._replacing(())

    def trial_exited(self, request: int) -> Decided:
        return Decided(replace(self, done=self.done | {request}, trials_completed=self.trials_completed + 1))

    def progress(self) -> float:
        """Trials that reached rung 0 over max_trials with Determined's 20%
        margin; once max_trials did, at least the share of valid trials that ended."""
        entered = len(self.rungs[0].metrics)
        progress = entered / (1.2 * self.max_trials)
        if entered == self.max_trials:
            return max(progress, (self.trials_completed - self.invalid_trials) / self.max_trials)
        return progress

    def _climbed(
        self, request: int, value: float, time: int, reported: float
    ) -> tuple["AsyncHalving", tuple[Action, ...]]:
        """Ranks the trial at every rung this report reaches (one report may
        pass several), up to the first one it does not survive. `reported` is
        the metric as the trial reported it (`value` is smaller-better)."""
        rungs, rung = list(self.rungs), self.trial_rungs[request]
        actions: list[Action] = []
        while time >= rungs[rung].units_needed:
            rungs[rung], position = rungs[rung].inserted(request, value)
            if rung == len(rungs) - 1:
                top = f"reached the top rung ({self._units(rung)}): {self.metric} {number(reported)}"
                actions.append(Stop(request, top, rung))
                break
            if position >= rungs[rung].kept(self.divisor):
                actions.append(Stop(request, self._cut(rung, rungs[rung], reported), rung))
                break
            rung += 1
            actions.append(SetLength(request, rung, rungs[rung].units_needed))
        method = replace(self, rungs=tuple(rungs), trial_rungs={**self.trial_rungs, request: rung})
        return method, tuple(actions)

    def _units(self, rung: int) -> str:
        return f"{self.rungs[rung].units_needed} {self.time_metric}"

    def _cut(self, index: int, rung: Rung, reported: float) -> str:
        """Why a trial ranked at `rung` goes no further, with the numbers."""
        return (
            f"cut at rung {index} ({self._units(index)}): {self.metric} {number(reported)}"
            f" not in the top 1/{self.divisor:g} of {len(rung.metrics)}"
        )

    def _replacing(self, actions: tuple[Action, ...]) -> Decided:
        """A new trial for one the search is done with, while the budget lasts."""
        room = self.requested - self.invalid_trials < self.max_trials
        return self._creating(1 if room else 0, actions)

    def _creating(self, count: int, actions: tuple[Action, ...]) -> Decided:
        reason = f"{self.label}: a new trial for rung 0 ({self._units(0)})"
        create = Create(length=self.rungs[0].units_needed, bracket=self.bracket, reason=reason)
        return Decided(replace(self, requested=self.requested + count), actions + (create,) * count)

    def _with_rung(self, index: int, rung: Rung) -> tuple[Rung, ...]:
        return self.rungs[:index] + (rung,) + self.rungs[index + 1 :]

    def _metric_value(self, metrics: Mapping[str, Any]) -> float:
        """The searcher metric, smaller better; NaN (a diverged trial) ranks worst."""
        value = _reported_number(metrics, self.metric, "searcher metric")
        value = value if self.smaller_is_better else -value
        return math.inf if math.isnan(value) else value

    def _time_value(self, metrics: Mapping[str, Any], steps_completed: int) -> int:
        if self.time_from_steps and self.time_metric not in metrics:
            return steps_completed
        time = _reported_number(metrics, self.time_metric, "time metric")
        if not math.isfinite(time):
            raise SearcherMetricError(f"the time metric {self.time_metric!r} must be finite, not {time}")
        return int(time)


def _reported_number(metrics: Mapping[str, Any], name: str, what: str) -> float:
    reported = ", ".join(sorted(map(str, metrics))) or "nothing"
    if name not in metrics:
        raise SearcherMetricError(f"the validation lacks the {what} {name!r} (it reported: {reported})")
    value = metrics[name]
    if isinstance(value, bool) or not isinstance(value, Real):
        raise SearcherMetricError(
            f"the {what} {name!r} must be a number, not {value!r} (reported: {reported})"
        )
    return float(value)
