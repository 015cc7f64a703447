"""`grid` search (Determined's `grid.go`): one trial per grid point, the last
point first, at most so many at a time; a point whose trial fails is not
tried again."""

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from determined.common.expconf import Hyperparameter
from services.searcher.methods.base import Create, Decided, ExitReason
from services.searcher.sampling import grid_point, grid_size


@dataclass(frozen=True, kw_only=True)
class GridSearch:
    """`hyperparameters` is the typed form (`ExperimentConfig.hyperparameters`);
    `max_concurrent_trials` 0 = every point at once."""

    hyperparameters: Mapping[str, Hyperparameter]
    max_concurrent_trials: int
    requested: int = 0
    exited: int = 0

    @property
    def total(self) -> int:
        return grid_size(self.hyperparameters)

    def initial_trials(self) -> Decided:
        if self.max_concurrent_trials == 0:
            return self._creating(self.total)
        return self._creating(min(self.total, self.max_concurrent_trials))

    def trial_created(self, request: int, create: Create) -> "GridSearch":
        return self

    def validation_reported(self, request: int, metrics: Mapping[str, Any], steps_completed: int) -> Decided:
        return Decided(self)

    def trial_exited_early(self, request: int, reason: ExitReason) -> Decided:
        return Decided(self)

    def trial_exited(self, request: int) -> Decided:
        method = replace(self, exited=self.exited + 1)
        return method._creating(1 if method.requested < method.total else 0)

    def progress(self) -> float:
        return self.exited / self.total

    def _creating(self, count: int) -> Decided:
        points = range(self.requested, self.requested + count)
        creates = tuple(
            Create(
                hparams=grid_point(self.hyperparameters, self.total - 1 - k),
                reason=f"grid point {self.total - k} of {self.total}",
            )
            for k in points
        )
        return Decided(replace(self, requested=self.requested + count), creates)
