"""The scheduler's settings as the pure core sees them (the service reads
them from the environment in __main__.py)."""

from dataclasses import dataclass, field

from services.common.scheduling import DEFAULT_POOL, DEFAULT_PRIORITY, FAIR_SHARE, SCHEDULER_TYPES


@dataclass(frozen=True)
class SchedulerConfig:
    # The scheduler of a pool that `pool_types` does not name.
    default_type: str = FAIR_SHARE
    # Pool name -> "fair_share" | "priority".
    pool_types: dict[str, str] = field(default_factory=dict)
    # An allocation is never preempted before it ran this long since it was
    # assigned: a preempted trial must get some work done between two stops.
    min_run_s: float = 30.0
    # The priority of a request that gives none (0).
    default_priority: int = DEFAULT_PRIORITY

    def __post_init__(self) -> None:
        for pool, kind in {DEFAULT_POOL: self.default_type, **self.pool_types}.items():
            if kind not in SCHEDULER_TYPES:
                raise ValueError(f"pool {pool!r}: scheduler type {kind!r} is not one of {SCHEDULER_TYPES}")

    def type_of(self, pool: str) -> str:
        return self.pool_types.get(pool, self.default_type)

    @property
    def min_run_ns(self) -> int:
        return int(self.min_run_s * 1e9)
