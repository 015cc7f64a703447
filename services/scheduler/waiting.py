"""What both pool schedulers share: zero-slot requests, and why a request
waits, in users' words."""

from services.scheduler.pool import Plan, Pool
from services.scheduler.state import Request


def start_outside_shares(pool: Pool, request: Request, plan: Plan) -> None:
    """A request for no slot runs at once on any usable agent (the fullest):
    it takes nothing from anyone."""
    placements = pool.slots.fit(0)
    if placements is None:
        plan.waiting[request.allocation_id] = f"no agent in pool {pool.name!r}"
    else:
        plan.start(request, placements, pool.slots, "needs no slot")


def over_capacity(pool: Pool, request: Request) -> str:
    slots = request.slots
    if not pool.slots.sizes:
        return f"no agent in pool {pool.name!r}"
    if request.single_agent:
        return f"needs {slots} slots on one agent; the largest agent of pool {pool.name!r} has {pool.slots.largest}"
    return f"needs {slots} slots; pool {pool.name!r} has {pool.capacity}"


def no_room(pool: Pool, slots: int) -> str:
    if not pool.slots.sizes:
        return f"no agent in pool {pool.name!r}"
    largest, agent_id = pool.slots.largest_block()
    free = pool.slots.total
    where = f" on {agent_id}" if largest else ""
    others = f" ({free} free in all)" if free > largest else ""
    return f"needs {slots} slots; the largest free block is {largest}{where}{others}"
