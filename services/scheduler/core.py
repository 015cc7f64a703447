"""The scheduler's pure core: which allocation request gets which agents'
slots.

It reads only allocation requests (of any task: a trial today, commands and
notebooks later), agents and allocation exits; what an allocation's end means
for its task is the task owner's business (services/searcher/lifecycle.py).

Decides:
- AllocationAssigned: first come first served in request order, the whole
  gang of `slots` at once on one agent; a request that does not fit now
  blocks the ones behind it (no backfilling), unless no registered agent could
  ever hold it;
- AllocationCanceled: a request asked to stop or die before it was assigned
  (nothing ran, so no agent will ever report its exit).

The scheduler is the one decider of a pending request's fate, so an
assignment and a cancel never race each other. A stop request that reaches
the log just before the assignment finds the allocation assigned: the agent
that runs it sees the stop as well.
"""

from dataclasses import dataclass, field, replace

from determined.proto import events_pb2
from services.common.decider import PureCore
from services.common.envelope import Append, Envelope, aggregate, payload_of


@dataclass(frozen=True)
class Request:
    requested: events_pb2.AllocationRequested
    # Where it runs, once assigned: agent id -> slot ids.
    placements: tuple[tuple[str, tuple[int, ...]], ...] = ()
    # Asked to stop or die: withdrawn if still pending.
    withdrawn: bool = False

    @property
    def allocation_id(self) -> str:
        return self.requested.allocation_id

    @property
    def assigned(self) -> bool:
        return bool(self.placements)


@dataclass(frozen=True)
class SchedulerState:
    # Agent id -> its slot ids, as last registered.
    agents: dict[str, tuple[int, ...]] = field(default_factory=dict)
    # Requests that have not exited or been canceled, in request order (the
    # queue's order: replacing a key keeps its place).
    requests: dict[str, Request] = field(default_factory=dict)


SCHEDULER_FOLDS = (
    "agent_registered",
    "allocation_requested",
    "allocation_assigned",
    "allocation_stop_requested",
    "allocation_kill_requested",
    "allocation_exited",
    "allocation_canceled",
)


class SchedulerCore(PureCore[SchedulerState]):
    def __init__(self) -> None:
        super().__init__(SCHEDULER_FOLDS, SchedulerState, evolve, decide)


# -- evolve -----------------------------------------------------------------------


def evolve(state: SchedulerState, envelope: Envelope) -> SchedulerState:
    event = payload_of(envelope)
    match event:
        case events_pb2.AgentRegistered():
            slots = tuple(slot.slot_id for slot in event.slots)
            return replace(state, agents={**state.agents, event.agent_id: slots})
        case events_pb2.AllocationRequested():
            return _with_request(state, Request(event))
        case events_pb2.AllocationAssigned():
            placements = tuple((p.agent_id, tuple(p.slot_ids)) for p in event.placements)
            return _update(state, event.allocation_id, placements=placements)
        case events_pb2.AllocationStopRequested() | events_pb2.AllocationKillRequested():
            return _update(state, event.allocation_id, withdrawn=True)
        case events_pb2.AllocationExited() | events_pb2.AllocationCanceled():
            requests = {k: v for k, v in state.requests.items() if k != event.allocation_id}
            return replace(state, requests=requests)
    return state


def _update(state: SchedulerState, allocation_id: str, **changes: object) -> SchedulerState:
    request = state.requests.get(allocation_id)
    return state if request is None else _with_request(state, replace(request, **changes))  # type: ignore[arg-type]


def _with_request(state: SchedulerState, request: Request) -> SchedulerState:
    return replace(state, requests={**state.requests, request.allocation_id: request})


# -- decide -----------------------------------------------------------------------


def decide(state: SchedulerState) -> list[Append]:
    pending = [r for r in state.requests.values() if not r.assigned]
    canceled = [_canceled(r) for r in pending if r.withdrawn]
    return canceled + _assignments(state, [r for r in pending if not r.withdrawn])


def _canceled(request: Request) -> Append:
    event = events_pb2.AllocationCanceled(
        allocation_id=request.allocation_id,
        task_id=request.requested.task_id,
        reason="stopped before it was assigned slots",
    )
    return Append(
        aggregate("allocation", request.allocation_id), event, f"allocation-canceled-{request.allocation_id}"
    )


def _assignments(state: SchedulerState, queue: list[Request]) -> list[Append]:
    free = _free_slots(state)
    largest = max((len(slots) for slots in state.agents.values()), default=0)
    appends: list[Append] = []
    for request in queue:
        needed = request.requested.slots
        agent_id = next((a for a in sorted(free) if len(free[a]) >= needed), None)
        if agent_id is None:
            if needed <= largest:
                break
            continue
        slot_ids, free[agent_id] = free[agent_id][:needed], free[agent_id][needed:]
        appends.append(_assigned(request, agent_id, slot_ids))
    return appends


def _free_slots(state: SchedulerState) -> dict[str, list[int]]:
    used: dict[str, set[int]] = {}
    for request in state.requests.values():
        for agent_id, slot_ids in request.placements:
            used.setdefault(agent_id, set()).update(slot_ids)
    return {
        agent_id: [s for s in slots if s not in used.get(agent_id, set())]
        for agent_id, slots in state.agents.items()
    }


def _assigned(request: Request, agent_id: str, slot_ids: list[int]) -> Append:
    event = events_pb2.AllocationAssigned(
        allocation_id=request.allocation_id,
        task_id=request.requested.task_id,
        placements=[events_pb2.Placement(agent_id=agent_id, slot_ids=slot_ids)],
    )
    return Append(
        aggregate("allocation", request.allocation_id),
        event,
        f"allocation-assigned-{request.allocation_id}",
    )
