"""The scheduler's state and how each event it reads changes it.

Kept cheap to update: the bench folds events into a state of 1,000 agents and
some 18,000 open requests, so `evolve` copies only the dicts an event
changes (each a shallow copy, some microseconds per thousand entries). Two
small indexes, updated as requests are assigned and end, spare `decide` a
walk over every request: the slots held on each agent, and how many open
requests each job has (a decision reads requests in order only until it has
seen every job's first).
"""

import sys
from dataclasses import dataclass, field, replace

from determined.proto import events_pb2
from services.common.envelope import Envelope, payload_of
from services.common.scheduling import DEFAULT_POOL
from services.common.stops import NO_STOP, Stops


@dataclass(frozen=True)
class AgentView:
    slot_ids: tuple[int, ...]
    resource_pool: str
    # Where a gang's other workers reach it: its registered address, else its hostname.
    address: str
    registration_event_id: str
    enabled: bool = True
    # Disabled with drain: what runs there finishes, nothing new comes.
    draining: bool = False
    # No heartbeat for its current registration; counts again once it registers anew.
    lost: bool = False
    lost_reason: str = ""
    # Slots an admin disabled (det slot disable): nothing new is placed there;
    # those in `draining_slots` too let what runs there finish, the others stop it.
    disabled_slots: frozenset[int] = frozenset()
    draining_slots: frozenset[int] = frozenset()

    @property
    def usable(self) -> bool:
        """Whether new work may be placed on it (on its enabled slots)."""
        return self.enabled and not self.lost

    @property
    def stopped_slots(self) -> frozenset[int]:
        """Its slots disabled without drain: what runs there is asked to stop."""
        return self.disabled_slots - self.draining_slots


@dataclass(frozen=True)
class PartExit:
    """One agent's part of a multi-agent allocation exited."""

    exited: events_pb2.AllocationResourcesExited
    # Exited non-zero, with an error, or killed without anyone asking.
    failed: bool


@dataclass(frozen=True)
class Request:
    requested: events_pb2.AllocationRequested
    # Read from `requested` once (a protobuf field read costs more than an attribute's).
    allocation_id: str = ""
    slots: int = 0
    pool: str = DEFAULT_POOL
    job_id: str = ""
    preemptible: bool = False
    # A task's (not a trial's): it runs on one agent, never spread over several.
    single_agent: bool = False
    # Where it runs, once assigned: agent id -> slot ids (the first is the chief).
    placements: tuple[tuple[str, tuple[int, ...]], ...] = ()
    # Asked to stop or die (a pending one is then canceled; a running one is
    # on its way out: never asked again, it keeps its slots until it exits),
    # unless a pause's stop, the only one, is withdrawn (stops.py).
    withdrawn: bool = False
    stops: Stops = NO_STOP
    kill_requested: bool = False
    requested_at_ns: int = 0
    assigned_at_ns: int = 0
    # Assignment order (newest first is the preemption order).
    assigned_seq: int = 0
    part_exits: tuple[PartExit, ...] = ()

    @property
    def assigned(self) -> bool:
        return bool(self.placements)


def new_request(requested: events_pb2.AllocationRequested, requested_at_ns: int) -> Request:
    return Request(
        requested,
        allocation_id=requested.allocation_id,
        slots=requested.slots,
        # Interned: a job's requests share one string (cheap to compare and to read in bulk).
        pool=sys.intern(requested.resource_pool or DEFAULT_POOL),
        job_id=sys.intern(requested.job_id or f"task/{requested.task_id}"),
        preemptible=requested.preemptible,
        single_agent=requested.HasField("task"),
        requested_at_ns=requested_at_ns,
    )


@dataclass(frozen=True)
class JobOverride:
    """What JobResourcesChanged set for a job (None: the requests' own value)."""

    priority: int | None = None
    weight: float | None = None
    max_slots: int | None = None


@dataclass(frozen=True)
class SchedulerState:
    # Agent id -> its current registration and state.
    agents: dict[str, AgentView] = field(default_factory=dict)
    # Requests that have not exited or been canceled, in request order (the
    # queue's order: replacing a key keeps its place).
    requests: dict[str, Request] = field(default_factory=dict)
    jobs: dict[str, JobOverride] = field(default_factory=dict)
    # Agent id -> the slot ids the open requests hold there (a slot once per
    # holder), so that a decision finds the free slots without a walk over
    # every request.
    placed: dict[str, tuple[int, ...]] = field(default_factory=dict)
    # (pool, job id) -> how many open requests it has, so that a decision
    # finds each job's first open request without a walk over every request.
    open_jobs: dict[tuple[str, str], int] = field(default_factory=dict)
    # The newest time folded: envelopes' occurred_at_ns and clock ticks.
    now_ns: int = 0
    assignments: int = 0


SCHEDULER_FOLDS = (
    "agent_registered",
    "agent_lost",
    "agent_disabled",
    "agent_enabled",
    "slot_disabled",
    "slot_enabled",
    "job_resources_changed",
    "allocation_requested",
    "allocation_assigned",
    "allocation_stop_requested",
    "allocation_stop_withdrawn",
    "allocation_kill_requested",
    "allocation_resources_exited",
    "allocation_exited",
    "allocation_canceled",
)


def tick(state: SchedulerState, now_ns: int) -> SchedulerState:
    """The clock moved on with no event: min-run guards may have expired."""
    return state if now_ns <= state.now_ns else replace(state, now_ns=now_ns)


def evolve(state: SchedulerState, envelope: Envelope) -> SchedulerState:
    state = tick(state, envelope.occurred_at_ns)
    event = payload_of(envelope)
    match event:
        case events_pb2.AgentRegistered():
            return _registered(state, event, envelope.event_id)
        case events_pb2.AgentLost():
            agent = state.agents.get(event.agent_id)
            if agent is None or agent.registration_event_id != event.registration_event_id:
                return state  # an older registration's loss: the agent is back already
            return _with_agent(state, event.agent_id, replace(agent, lost=True, lost_reason=event.reason))
        case events_pb2.AgentDisabled():
            agent = state.agents.get(event.agent_id)
            changed = agent and replace(agent, enabled=False, draining=event.drain)
            return _with_agent(state, event.agent_id, changed) if changed else state
        case events_pb2.AgentEnabled():
            agent = state.agents.get(event.agent_id)
            changed = agent and replace(agent, enabled=True, draining=False)
            return _with_agent(state, event.agent_id, changed) if changed else state
        case events_pb2.SlotDisabled() | events_pb2.SlotEnabled():
            return _slot_changed(state, event)
        case events_pb2.JobResourcesChanged():
            return _job_changed(state, event)
        case events_pb2.AllocationRequested():
            if event.allocation_id in state.requests:
                return state
            asked = new_request(event, envelope.occurred_at_ns)
            job = (asked.pool, asked.job_id)
            open_jobs = {**state.open_jobs, job: state.open_jobs.get(job, 0) + 1}
            return replace(_with_request(state, asked), open_jobs=open_jobs)
        case events_pb2.AllocationAssigned():
            request = state.requests.get(event.allocation_id)
            if request is None or request.assigned:
                return state
            placements = tuple((p.agent_id, tuple(p.slot_ids)) for p in event.placements)
            seq = state.assignments + 1
            running = replace(
                request, placements=placements, assigned_at_ns=envelope.occurred_at_ns, assigned_seq=seq
            )
            placed = _holding(state.placed, placements, held=True)
            return replace(_with_request(state, running), assignments=seq, placed=placed)
        case events_pb2.AllocationStopRequested() | events_pb2.AllocationStopWithdrawn():
            return _stops_changed(state, event, envelope.event_id)
        case events_pb2.AllocationKillRequested():
            return _update(state, event.allocation_id, withdrawn=True, kill_requested=True)
        case events_pb2.AllocationResourcesExited():
            return _part_exited(state, event)
        case events_pb2.AllocationExited() | events_pb2.AllocationCanceled():
            gone = state.requests.get(event.allocation_id)
            if gone is None:
                return state
            requests = dict(state.requests)
            del requests[event.allocation_id]
            placed = _holding(state.placed, gone.placements, held=False) if gone.placements else state.placed
            open_jobs = dict(state.open_jobs)
            job = (gone.pool, gone.job_id)
            open_jobs[job] -= 1
            if not open_jobs[job]:
                del open_jobs[job]
            return replace(state, requests=requests, placed=placed, open_jobs=open_jobs)
    return state


def _registered(state: SchedulerState, event: events_pb2.AgentRegistered, event_id: str) -> SchedulerState:
    before = state.agents.get(event.agent_id)
    agent = AgentView(
        slot_ids=tuple(slot.slot_id for slot in event.slots),
        resource_pool=event.resource_pool or DEFAULT_POOL,
        address=event.address or event.hostname,
        registration_event_id=event_id,
        # An operator's disable outlives the agent's restarts; a loss does not.
        enabled=before.enabled if before else True,
        draining=before.draining if before else False,
        disabled_slots=before.disabled_slots if before else frozenset(),
        draining_slots=before.draining_slots if before else frozenset(),
    )
    return _with_agent(state, event.agent_id, agent)


def _slot_changed(
    state: SchedulerState, event: events_pb2.SlotDisabled | events_pb2.SlotEnabled
) -> SchedulerState:
    """A slot disabled (with or without drain) or enabled again; kept across the agent's registrations."""
    agent = state.agents.get(event.agent_id)
    if agent is None:
        return state
    slot = frozenset((event.slot_id,))
    disabled = isinstance(event, events_pb2.SlotDisabled)
    draining = isinstance(event, events_pb2.SlotDisabled) and event.drain
    changed = replace(
        agent,
        disabled_slots=agent.disabled_slots | slot if disabled else agent.disabled_slots - slot,
        draining_slots=agent.draining_slots | slot if draining else agent.draining_slots - slot,
    )
    return _with_agent(state, event.agent_id, changed)


def _job_changed(state: SchedulerState, event: events_pb2.JobResourcesChanged) -> SchedulerState:
    before = state.jobs.get(event.job_id, JobOverride())
    after = replace(
        before,
        priority=event.priority if event.HasField("priority") else before.priority,
        weight=event.weight if event.HasField("weight") else before.weight,
        max_slots=event.max_slots if event.HasField("max_slots") else before.max_slots,
    )
    return replace(state, jobs={**state.jobs, event.job_id: after})


def _part_exited(state: SchedulerState, event: events_pb2.AllocationResourcesExited) -> SchedulerState:
    request = state.requests.get(event.allocation_id)
    if request is None or any(part.exited.agent_id == event.agent_id for part in request.part_exits):
        return state
    # A part killed on request exits non-zero: that is no failure.
    failed = bool(event.error) or (not request.withdrawn if event.killed else event.exit_code != 0)
    return _with_request(state, replace(request, part_exits=(*request.part_exits, PartExit(event, failed))))


def _with_agent(state: SchedulerState, agent_id: str, agent: AgentView) -> SchedulerState:
    return replace(state, agents={**state.agents, agent_id: agent})


def _stops_changed(
    state: SchedulerState,
    event: events_pb2.AllocationStopRequested | events_pb2.AllocationStopWithdrawn,
    event_id: str,
) -> SchedulerState:
    request = state.requests.get(event.allocation_id)
    if request is None:
        return state
    stops = request.stops.folded(event_id, event)
    if stops == request.stops:
        return state
    withdrawn = stops.requested or request.kill_requested
    return _with_request(state, replace(request, stops=stops, withdrawn=withdrawn))


def _update(state: SchedulerState, allocation_id: str, **changes: bool) -> SchedulerState:
    request = state.requests.get(allocation_id)
    if request is None:
        return state
    changed = replace(request, **changes)  # type: ignore[arg-type]
    return state if changed == request else _with_request(state, changed)


def _with_request(state: SchedulerState, request: Request) -> SchedulerState:
    return replace(state, requests={**state.requests, request.allocation_id: request})


def _holding(
    placed: dict[str, tuple[int, ...]], placements: tuple[tuple[str, tuple[int, ...]], ...], held: bool
) -> dict[str, tuple[int, ...]]:
    """`placed` with an allocation's slots now held (or given back)."""
    changed = dict(placed)
    for agent_id, slot_ids in placements:
        if not slot_ids:
            continue
        if held:
            changed[agent_id] = (*changed.get(agent_id, ()), *slot_ids)
            continue
        left = list(changed[agent_id])
        for slot_id in slot_ids:
            left.remove(slot_id)
        if left:
            changed[agent_id] = tuple(left)
        else:
            del changed[agent_id]
    return changed
