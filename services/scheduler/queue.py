"""The job queue as users see it (`det job list`): per pool, its jobs in the
order the pool's scheduler serves them, what they ask for and hold, and why
a waiting one waits. Pure: the scheduler publishes it
(services/scheduler/publishing.py); the gateway fills in names, owners and
types itself."""

from services.common.job_queue import JobView, PublishedQueue
from services.common.scheduling import PRIORITY
from services.scheduler.config import SchedulerConfig
from services.scheduler.core import plan_pool
from services.scheduler.pool import pools_of
from services.scheduler.state import SchedulerState


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


def published(
    state: SchedulerState, sequence: int, config: SchedulerConfig, kinds: list[str]
) -> PublishedQueue:
    """What the scheduler publishes of `state`, which covers the log up to `sequence`."""
    return PublishedQueue(
        sequence=sequence,
        kinds=tuple(kinds),
        default_type=config.default_type,
        pool_types=config.pool_types,
        default_priority=config.default_priority,
        jobs=tuple(job_queue(state, config)),
    )
