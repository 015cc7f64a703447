"""One resource pool as a scheduling pass sees it, built from the state in
one walk over the open requests, and the plan a pool's scheduler makes."""

from dataclasses import dataclass, field
from operator import attrgetter

from services.common.scheduling import DEFAULT_WEIGHT
from services.scheduler.config import SchedulerConfig
from services.scheduler.fitting import FreeSlots, Placement
from services.scheduler.state import Request, SchedulerState


@dataclass(frozen=True)
class JobSettings:
    priority: int
    weight: float
    # 0 = no cap.
    max_slots: int
    # Its place among the pool's jobs: the order of their first open requests.
    order: int
    submitted_at_ns: int


@dataclass
class Pool:
    name: str
    slots: FreeSlots
    # Slots that compete: the usable agents' enabled slots, less those held
    # by allocations that also run on an agent or a slot gone unusable
    # (draining, disabled, lost: they leave, they are not shared).
    capacity: int = 0
    # Assigned and not asked to stop, every part on a usable agent, in
    # assignment order (oldest first).
    running: list[Request] = field(default_factory=list)
    # Slots on usable agents held by allocations asked to stop: they come back.
    stopping_slots: int = 0
    # Not assigned, not withdrawn, in request order.
    pending: list[Request] = field(default_factory=list)
    jobs: dict[str, JobSettings] = field(default_factory=dict)
    # Agent id -> where a gang's workers reach it.
    addresses: dict[str, str] = field(default_factory=dict)

    def job(self, request: Request) -> JobSettings:
        return self.jobs[request.job_id]

    def room_for(self, request: Request) -> int:
        """The most slots the request could get here: one agent's for a task."""
        return self.slots.largest if request.single_agent else self.capacity


@dataclass
class Plan:
    starts: list[tuple[Request, list[Placement]]] = field(default_factory=list)
    # Running allocations to ask to stop, each with the reason's detail.
    victims: list[tuple[Request, str]] = field(default_factory=list)
    # Allocation id -> why a pending request waits, in users' words.
    waiting: dict[str, str] = field(default_factory=dict)
    # Allocation id -> why a request starts now and there (AllocationAssigned.reason).
    reasons: dict[str, str] = field(default_factory=dict)

    def start(self, request: Request, placements: list[Placement], slots: FreeSlots, why: str) -> None:
        """Starts `request` on `placements`, taken from `slots`; `why` the
        scheduler's words, to which where it goes is added."""
        self.reasons[request.allocation_id] = f"{why}; {slots.where(placements)}"
        slots.take(placements)
        self.starts.append((request, placements))


def pools_of(state: SchedulerState, config: SchedulerConfig) -> dict[str, Pool]:
    """Every pool that has an agent or an open request, by name."""
    pools: dict[str, Pool] = {}
    all_usable = True
    for agent_id, agent in sorted(state.agents.items()):
        pool = _pool(pools, agent.resource_pool)
        pool.addresses[agent_id] = agent.address
        if agent.usable:
            enabled = [s for s in agent.slot_ids if s not in agent.disabled_slots]
            taken = state.placed.get(agent_id)
            free = [s for s in enabled if s not in taken] if taken else enabled
            pool.slots.add(agent_id, free, len(enabled))
            pool.capacity += len(enabled)
        all_usable = all_usable and agent.usable and not agent.disabled_slots
    requests = list(state.requests.values())
    # Each pool's jobs, in the order of their first open requests: the first
    # requests in order, up to the last job's first.
    jobs_left = len(state.open_jobs)
    for request in requests:
        if not jobs_left:
            break
        pool = pools.get(request.pool) or _pool(pools, request.pool)
        if request.job_id not in pool.jobs:
            pool.jobs[request.job_id] = _settings(state, config, request, len(pool.jobs))
            jobs_left -= 1
    assigned = [request for request in requests if request.placements]
    if all_usable and len(pools) == 1 and state.agents:
        # One pool, every agent usable: every allocation runs there whole.
        [pool] = pools.values()
        pool.pending = [request for request in requests if not request.placements and not request.withdrawn]
        pool.stopping_slots = sum(len(ids) for r in assigned if r.withdrawn for _, ids in r.placements)
        pool.running = sorted((r for r in assigned if not r.withdrawn), key=attrgetter("assigned_seq"))
        return pools
    running: list[Request] = []
    for request in requests:
        pool = pools[request.pool]
        if not request.placements:
            if not request.withdrawn:
                pool.pending.append(request)
            continue
        sizes = pool.slots.sizes
        on_usable = 0
        everywhere = True
        for agent_id, slot_ids in request.placements:
            if agent_id in sizes:
                usable_slots = _enabled(slot_ids, state.agents[agent_id].disabled_slots)
                on_usable += usable_slots
                everywhere = everywhere and usable_slots == len(slot_ids)
            else:
                everywhere = False
        if request.withdrawn:
            pool.stopping_slots += on_usable
        elif everywhere:
            running.append(request)
        else:
            pool.capacity -= on_usable
    running.sort(key=attrgetter("assigned_seq"))
    for request in running:
        pools[request.pool].running.append(request)
    return pools


def _enabled(slot_ids: tuple[int, ...], disabled: frozenset[int]) -> int:
    """How many of the slots are enabled."""
    return sum(1 for s in slot_ids if s not in disabled) if disabled else len(slot_ids)


def _pool(pools: dict[str, Pool], name: str) -> Pool:
    pool = pools.get(name)
    if pool is None:
        pool = pools[name] = Pool(name, FreeSlots())
    return pool


def _settings(state: SchedulerState, config: SchedulerConfig, request: Request, order: int) -> JobSettings:
    asked = request.requested
    override = state.jobs.get(request.job_id)
    priority = asked.priority or config.default_priority
    weight = asked.weight if asked.weight > 0 else DEFAULT_WEIGHT
    max_slots = asked.max_slots
    if override is not None:
        if override.priority is not None:
            priority = override.priority or config.default_priority
        weight = override.weight if override.weight is not None and override.weight > 0 else weight
        max_slots = override.max_slots if override.max_slots is not None else max_slots
    return JobSettings(priority, weight, max_slots, order, request.requested_at_ns)
