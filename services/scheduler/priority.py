"""The priority scheduler: lower number first, then the job's place in the
queue, then request order.

A request that fits starts. One that does not holds back every free slot
(nothing behind it starts in front of it), counts the slots already on
their way back, and asks running allocations of strictly lower priority to
stop for the rest: the least important first, newest first, only those that
ran min_run_s, and only if they would free enough (preempting in vain is
not done). max_slots still caps a job.
"""

from services.scheduler.pool import Plan, Pool
from services.scheduler.state import Request
from services.scheduler.waiting import no_room, over_capacity, start_outside_shares


def plan(pool: Pool, now_ns: int, min_run_ns: int, explain: bool = False) -> Plan:
    """The pool's decisions; with `explain`, why each request that waits does."""
    result = Plan()
    held: dict[str, int] = {}
    for request in pool.running:
        held[request.job_id] = held.get(request.job_id, 0) + request.slots
    # Running allocations that could make room, least important and newest first.
    rank = {job_id: (settings.priority, settings.order) for job_id, settings in pool.jobs.items()}
    candidates = sorted(
        (r for r in pool.running if r.preemptible),
        key=lambda r: (-rank[r.job_id][0], -r.assigned_seq),
    )
    chosen: set[str] = set()
    reserved = 0  # free slots held back for a waiting request
    coming_back = pool.stopping_slots  # slots not yet promised to a waiting request
    blocked_by: int | None = None
    # Once nothing is free, coming back or of lower priority, what is left can
    # only wait (its reasons are only worked out to `explain`).
    hopeless = False
    for request in sorted(pool.pending, key=lambda r: rank[r.job_id]):
        if request.slots == 0:
            start_outside_shares(pool, request, result)
            continue
        if hopeless:
            continue
        settings = pool.job(request)
        if request.slots > pool.room_for(request):
            result.waiting[request.allocation_id] = over_capacity(pool, request)
            continue
        holds = held.get(request.job_id, 0)
        if settings.max_slots and holds + request.slots > settings.max_slots:
            result.waiting[request.allocation_id] = f"max_slots {settings.max_slots} reached"
            continue
        free = pool.slots.total - reserved
        # A gang may span agents: enough free slots always fit it (a task's must be on one agent).
        placements = pool.slots.fit(request.slots, request.single_agent) if request.slots <= free else None
        if placements is not None:
            why = f"priority {settings.priority}: the first waiting request of pool {pool.name!r} that fits"
            result.start(request, placements, pool.slots, why)
            held[request.job_id] = holds + request.slots
            continue
        reserved += free
        held[request.job_id] = holds + request.slots  # what it waits for counts against max_slots
        short = max(request.slots - free, 0)
        back = min(coming_back, short)
        coming_back, short = coming_back - back, short - back
        victims = _victims(pool, candidates, chosen, settings.priority, short, now_ns, min_run_ns)
        for victim in victims:
            chosen.add(victim.allocation_id)
            result.victims.append((victim, f"a priority {settings.priority} request needs its slots"))
        if back or victims:
            reason = "waits for running allocations to give their slots back"
        elif blocked_by is not None:
            reason = f"waits behind priority {blocked_by} jobs"
        else:
            reason = no_room(pool, request.slots)
        result.waiting[request.allocation_id] = reason
        blocked_by = settings.priority if blocked_by is None else blocked_by
        lower = candidates and rank[candidates[0].job_id][0] > settings.priority
        hopeless = not explain and not coming_back and reserved == pool.slots.total and not lower
    return result


def _victims(
    pool: Pool,
    candidates: list[Request],
    chosen: set[str],
    priority: int,
    short: int,
    now_ns: int,
    min_run_ns: int,
) -> list[Request]:
    """The fewest of `candidates` (in their order) of lower priority that
    free `short` slots; none when even all of them, ready or not, would not."""
    if short <= 0 or not candidates or pool.job(candidates[0]).priority <= priority:
        return []  # nothing to free, or nothing of lower priority (the least important come first)
    lower = [r for r in candidates if pool.job(r).priority > priority and r.allocation_id not in chosen]
    if sum(r.slots for r in lower) < short:
        return []
    victims: list[Request] = []
    for request in lower:
        if short <= 0:
            break
        if now_ns - request.assigned_at_ns >= min_run_ns:
            victims.append(request)
            short -= request.slots
    return victims
