"""Fair share: a pool's slots divided among its jobs by weight.

Weighted max-min progressive filling, one request at a time: the job that
holds the fewest slots per unit of weight gets its next request, while it
fits in what is left of the pool and within the job's max_slots. A job's
requests are taken in this order: its non-preemptible allocations first
(they are never given back), then its running ones oldest first, then its
pending ones in request order (a request that does not fit ends the job's
turn: within a job, first come first served). Pending requests count as
demand whether or not they fit now, so a starved job is rebalanced toward.
(It is worked out in bulk up to a water level where no turn can find too few
slots left, then one request at a time: the same result, without a heap pop
per slot.)

What the filling takes is what each job is entitled to. Entitled pending
requests start as they fit; for those that cannot yet, running allocations
outside every entitlement are asked to stop, newest first, once they ran
min_run_s, and only as many as the waiting requests need beyond the free
slots and the slots already on their way back.
"""

import heapq
from bisect import bisect_left, bisect_right
from itertools import accumulate
from math import inf

from services.scheduler.pool import Plan, Pool
from services.scheduler.state import Request
from services.scheduler.waiting import no_room, over_capacity, start_outside_shares

# Fewer slots than this to fill below the water level go one request at a
# time: cheaper than the level's bisection (some 30 walks over the jobs).
BULK_MIN_SLOTS = 64


def plan(pool: Pool, now_ns: int, min_run_ns: int, explain: bool = False) -> Plan:
    """The pool's decisions; with `explain`, why each request that waits does."""
    result = Plan()
    entitled, shares = _entitlements(pool)
    held: dict[str, int] = {}
    for request in pool.running if explain else ():
        held[request.job_id] = held.get(request.job_id, 0) + request.slots
    need = 0
    for request in pool.pending:
        if request.slots == 0:
            start_outside_shares(pool, request, result)
            continue
        if request.allocation_id not in entitled:
            if explain:
                result.waiting[request.allocation_id] = _why_not_entitled(pool, request, shares, held)
            continue
        placements = pool.slots.fit(request.slots, request.single_agent)
        if placements is None:
            need += request.slots
            if explain:
                result.waiting[request.allocation_id] = no_room(pool, request.slots)
            continue
        share, capacity = shares[request.job_id], pool.capacity
        why = f"fair share: job {request.job_id} is entitled to {share} of {capacity} slots in pool {pool.name!r}"
        result.start(request, placements, pool.slots, why)
    short = need - pool.slots.total - pool.stopping_slots
    for request in reversed(pool.running):
        if short <= 0:
            break
        if request.allocation_id in entitled or not _preemptible(request, now_ns, min_run_ns):
            continue
        share = shares.get(request.job_id, 0)
        result.victims.append((request, f"job {request.job_id} is over its fair share of {share} slots"))
        short -= request.slots
    return result


def _entitlements(pool: Pool) -> tuple[set[str], dict[str, int]]:
    """The allocation ids the filling takes, and each job's entitled slots."""
    shares = {job_id: 0 for job_id in pool.jobs}
    entitled: set[str] = set()
    # Each job's queue: its requests' allocation ids and sizes (read in the
    # pool's order: a walk over the requests in job order reads memory all over).
    ids: dict[str, list[str]] = {job_id: [] for job_id in pool.jobs}
    sizes: dict[str, list[int]] = {job_id: [] for job_id in pool.jobs}
    for request in pool.running:
        if request.preemptible:
            ids[request.job_id].append(request.allocation_id)
            sizes[request.job_id].append(request.slots)
        else:  # never given back: held whatever the shares say
            shares[request.job_id] += request.slots
            entitled.add(request.allocation_id)
    for request in pool.pending:
        if 0 < request.slots <= pool.room_for(request):
            ids[request.job_id].append(request.allocation_id)
            sizes[request.job_id].append(request.slots)
    left = pool.capacity - sum(shares.values())
    # Job id -> its queue's running slot totals ([0, first, first + second, ...]).
    totals = {job_id: [0, *accumulate(job_sizes)] for job_id, job_sizes in sizes.items()}
    # Most of the filling in bulk, each job up to one water level; the last
    # slots one request at a time, lowest (shares / weight, order) first.
    biggest = max(map(max, filter(None, sizes.values())), default=0)
    taken = _filled(pool, totals, shares, left, biggest)
    for job_id, count in taken.items():
        if count:
            shares[job_id] += totals[job_id][count]
            left -= totals[job_id][count]
            entitled.update(ids[job_id][:count])
    turns = [
        (shares[job_id] / pool.jobs[job_id].weight, pool.jobs[job_id].order, job_id, taken[job_id])
        for job_id, job_ids in ids.items()
        if taken[job_id] < len(job_ids)
    ]
    heapq.heapify(turns)
    while turns and left > 0:
        _, order, job_id, index = heapq.heappop(turns)
        slots = sizes[job_id][index]
        settings = pool.jobs[job_id]
        taken_slots = shares[job_id] + slots
        if slots > left or (settings.max_slots and taken_slots > settings.max_slots):
            continue  # the job's turn ends here
        shares[job_id] = taken_slots
        left -= slots
        entitled.add(ids[job_id][index])
        if index + 1 < len(ids[job_id]):
            heapq.heappush(turns, (taken_slots / settings.weight, order, job_id, index + 1))
    return entitled, shares


def _filled(
    pool: Pool, totals: dict[str, list[int]], shares: dict[str, int], left: int, biggest: int
) -> dict[str, int]:
    """Job id -> how many of its queue's first requests one at a time filling
    takes before any turn at or above a water level: a level low enough that
    every turn below it finds enough slots left, even for the biggest request
    (the filling below it is then the same whatever the turns' order)."""
    none = dict.fromkeys(totals, 0)
    budget = left - biggest * (len(totals) + 1)
    if budget < BULK_MIN_SLOTS or not biggest:
        return none
    # Job id -> its weight, its shares so far, and how many requests it may take (max_slots).
    jobs: dict[str, tuple[float, int, int]] = {}
    for job_id, job_totals in totals.items():
        if len(job_totals) == 1:
            continue  # nothing asked
        settings = pool.jobs[job_id]
        allowed = len(job_totals) - 1
        if settings.max_slots:  # turns past max_slots end the job's turn
            allowed = max(0, bisect_right(job_totals, settings.max_slots - shares[job_id], 1) - 1)
        jobs[job_id] = (settings.weight, shares[job_id], allowed)

    def filling(level: float) -> float:  # less the part of each job's last request above the level
        return sum(
            min(totals[j][allowed], max(0.0, level * w - held)) for j, (w, held, allowed) in jobs.items()
        )

    low = min(held / w for w, held, _ in jobs.values())
    high = max((held + totals[j][allowed]) / w for j, (w, held, allowed) in jobs.items())
    level = inf
    if filling(high) > budget:
        for _ in range(30):
            middle = (low + high) / 2
            low, high = (middle, high) if filling(middle) <= budget else (low, middle)
        level = low
    counts = dict(none)
    for job_id, (weight, held, allowed) in jobs.items():
        # The turns whose key (shares / weight before it) is below the level: a prefix.
        job_totals = totals[job_id]
        count = bisect_left(job_totals, level * weight - held, 0, allowed)
        while count > 0 and (held + job_totals[count - 1]) / weight >= level:
            count -= 1
        while count < allowed and (held + job_totals[count]) / weight < level:
            count += 1
        counts[job_id] = count
    if sum(totals[j][count] for j, count in counts.items()) > left - biggest:
        return none  # not expected: all of it one request at a time
    return counts


def _why_not_entitled(pool: Pool, request: Request, shares: dict[str, int], held: dict[str, int]) -> str:
    if request.slots > pool.room_for(request):
        return over_capacity(pool, request)
    settings = pool.job(request)
    holds = held.get(request.job_id, 0)
    if settings.max_slots and holds + request.slots > settings.max_slots:
        return f"max_slots {settings.max_slots} reached"
    return f"its fair share is {shares.get(request.job_id, 0)} slots and it holds {holds}"


def _preemptible(request: Request, now_ns: int, min_run_ns: int) -> bool:
    return request.preemptible and now_ns - request.assigned_at_ns >= min_run_ns
