"""`random` and `single` search (Determined's `random.go`): trials with fresh
hyperparameters, a fixed number of them, at most so many at a time."""

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from services.searcher.methods.base import Create, Decided, ExitReason


@dataclass(frozen=True, kw_only=True)
class RandomSearch:
    """`max_concurrent_trials` 0 = no cap. `single` is this with one trial,
    one at a time, and an invalid configuration not replaced."""

    max_trials: int
    max_concurrent_trials: int
    single: bool = False
    requested: int = 0
    # Trials that reported invalid hyperparameters and were replaced: they
    # do not count toward max_trials.
    invalid: int = 0
    exited: int = 0

    def initial_trials(self) -> Decided:
        if self.max_concurrent_trials == 0:
            return self._creating(self.max_trials)
        return self._creating(min(self.max_trials, self.max_concurrent_trials))

    def trial_created(self, request: int, create: Create) -> "RandomSearch":
        return self

    def validation_reported(self, request: int, metrics: Mapping[str, Any], steps_completed: int) -> Decided:
        return Decided(self)

    def trial_exited_early(self, request: int, reason: ExitReason) -> Decided:
        if reason is ExitReason.INVALID_HP and not self.single:
            return Decided(replace(self, invalid=self.invalid + 1))
        return Decided(self)

    def trial_exited(self, request: int) -> Decided:
        method = replace(self, exited=self.exited + 1)
        return method._creating(1 if method.requested - method.invalid < method.max_trials else 0)

    def progress(self) -> float:
        return (self.exited - self.invalid) / self.max_trials

    def _creating(self, count: int) -> Decided:
        # The draws counted as max_trials counts them (invalid ones replaced aside).
        first = self.requested - self.invalid + 1
        creates = tuple(Create(reason=self._reason(first + n)) for n in range(count))
        return Decided(replace(self, requested=self.requested + count), creates)

    def _reason(self, draw: int) -> str:
        return "the single trial" if self.single else f"random draw {draw} of {self.max_trials}"
