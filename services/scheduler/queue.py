"""The job queue as users see it (`det job list`): per pool, its jobs in the
order the pool's scheduler serves them, what they ask for and hold, and why
a waiting one waits. Pure: the gateway folds the scheduler's state and calls
`job_queue`; it fills in names, owners and types itself."""

from dataclasses import dataclass

from services.scheduler.config import PRIORITY, SchedulerConfig
from services.scheduler.core import plan_pool
from services.scheduler.pool import pools_of
from services.scheduler.state import SchedulerState


@dataclass(frozen=True)
class JobView:
    job_id: str
    resource_pool: str
    priority: int
    weight: float
    max_slots: int
    submitted_at_ns: int
    slots_needed: int
    slots_acquired: int
    # "QUEUED" (nothing holds slots) or "SCHEDULED" (something runs).
    state: str
    # From 1, within its pool.
    position: int
    # Why its first waiting request waits; "" when none does.
    waiting_reason: str


def job_queue(state: SchedulerState, config: SchedulerConfig) -> list[JobView]:
    views: list[JobView] = []
    for name, pool in sorted(pools_of(state, config).items()):
        needed: dict[str, int] = {}
        acquired: dict[str, int] = {}
        for request in state.requests.values():
            if request.pool == name and (request.placements or not request.withdrawn):
                needed[request.job_id] = needed.get(request.job_id, 0) + request.slots
                if request.placements:
                    acquired[request.job_id] = acquired.get(request.job_id, 0) + request.slots
        waiting: dict[str, str] = {}
        plan = plan_pool(pool, state, config, explain=True)
        for request in pool.pending:
            reason = plan.waiting.get(request.allocation_id)
            if reason:
                waiting.setdefault(request.job_id, reason)
        by_priority = config.type_of(name) == PRIORITY
        order = sorted(
            (job_id for job_id in pool.jobs if job_id in needed),
            key=lambda j: (pool.jobs[j].priority if by_priority else 0, pool.jobs[j].order),
        )
        for position, job_id in enumerate(order, start=1):
            settings = pool.jobs[job_id]
            views.append(
                JobView(
                    job_id=job_id,
                    resource_pool=name,
                    priority=settings.priority,
                    weight=settings.weight,
                    max_slots=settings.max_slots,
                    submitted_at_ns=settings.submitted_at_ns,
                    slots_needed=needed[job_id],
                    slots_acquired=acquired.get(job_id, 0),
                    state="SCHEDULED" if acquired.get(job_id) else "QUEUED",
                    position=position,
                    waiting_reason=waiting.get(job_id, ""),
                )
            )
    return views
