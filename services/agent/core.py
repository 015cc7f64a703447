"""The agent's pure core: the allocations assigned to this agent and what
became of them.

What an allocation runs is in its request (AllocationRequested's spec); the
scheduler's AllocationAssigned says which agents' slots it got. The core keeps
the specs of pending requests until they are placed, then the allocations
placed on this agent until they exit.

It decides one thing itself: an allocation assigned before this agent's
latest registration (a previous run of the agent) that never exited has no
process any more, so it is closed as "agent restarted" (`agent_lost`: not the
task's fault) and its task runs it again. Its process group, if anything of
it survived, was killed before this run registered (`folders.py`).

A run of the agent knows its own registration (by its boot id): until that
registration is folded, `registered` is false and the runner starts nothing,
for every allocation assigned so far belongs to an earlier run (the log can
be replayed before it says it caught up). Starting, stopping and killing
processes is the shell's business (`runner.py`), driven by this state.

The scheduler may declare this run's current registration lost (AgentLost:
no heartbeat for too long, e.g. the agent was stopped) and close its
allocations. The run is then `lost`: the runner kills every process it has,
and the core registers it again (the same registration, under the next boot
id of this run: `run_boot_id`), which orphans whatever was still open.

An allocation may span several agents (several placements): each agent runs
its own part (its slots, its container rank = the index of its placement) and
reports that part's end as AllocationResourcesExited; the scheduler closes
the allocation once every part ended. A single-agent allocation's agent
closes it itself (AllocationExited), as it always did.
"""

import functools
from dataclasses import dataclass, field, replace
from typing import Any

from determined.proto import events_pb2
from services.common.decider import PureCore
from services.common.envelope import Append, Envelope, aggregate, payload_of
from services.common.stops import NO_STOP, Stops
from services.common.trial_runtime import PROCESS

AGENT_RESTARTED = "agent restarted"
AGENT_RESTARTED_EXIT_CODE = -1


@dataclass(frozen=True)
class PendingRequest:
    """A request not yet placed, and the ids that its events answer."""

    requested: events_pb2.AllocationRequested
    event_id: str
    correlation_id: str
    # A stop or kill may reach the log just before the assignment.
    stops: Stops = NO_STOP
    kill_requested: bool = False


@dataclass(frozen=True)
class AgentAllocation:
    requested: events_pb2.AllocationRequested
    agent_id: str
    # This agent's slots of it.
    slot_ids: tuple[int, ...]
    # Assigned to an earlier run of this agent: its process is gone.
    orphaned: bool = False
    # Asked to stop gracefully (a pause's stop may be withdrawn: stops.py).
    stops: Stops = NO_STOP
    kill_requested: bool = False
    # The assignment's event id and correlation id: the agent's events about
    # this allocation answer it, so an operator can follow the chain.
    assigned_event_id: str = ""
    correlation_id: str = ""
    # The index of this agent's placement; every placement's address and
    # slot count, in placement order (the first is the chief's).
    container_rank: int = 0
    container_addrs: tuple[str, ...] = ()
    container_slot_counts: tuple[int, ...] = ()
    # This agent's part of a multi-agent allocation has ended (its
    # AllocationResourcesExited is in the log); the scheduler closes it.
    part_exited: bool = False
    # A task's server answered (its AllocationReady is in the log): a
    # restarted agent that reattaches it does not say so again.
    ready: bool = False

    @property
    def allocation_id(self) -> str:
        return self.requested.allocation_id

    @property
    def stop_requested(self) -> bool:
        return self.stops.requested

    @property
    def multi_agent(self) -> bool:
        return len(self.container_addrs) > 1

    @property
    def launch(self) -> events_pb2.TrialLaunch:
        """A trial's launch (empty for a task: its ids read 0)."""
        return self.requested.trial

    @property
    def is_task(self) -> bool:
        """A notebook, TensorBoard, command or shell (its spec is a TaskLaunch)."""
        return bool(self.requested.HasField("task"))

    @property
    def task(self) -> events_pb2.TaskLaunch:
        return self.requested.task

    @property
    def config_json(self) -> str:
        """The trial's experiment config, or the task's config (JSON)."""
        return self.task.config_json if self.is_task else self.launch.config_json

    @property
    def context_hash(self) -> str:
        return self.task.context_hash if self.is_task else self.launch.context_hash

    def answer(self, append: Append) -> Append:
        """`append` as an answer to this allocation's assignment."""
        return replace(append, causation_id=self.assigned_event_id, correlation_id=self.correlation_id)


@dataclass(frozen=True)
class AgentState:
    # Requests (of trials and tasks) not yet placed anywhere.
    pending: dict[str, PendingRequest] = field(default_factory=dict)
    # Allocations of this agent that have not exited.
    allocations: dict[str, AgentAllocation] = field(default_factory=dict)
    # This run's own registration is folded: what is assigned from now on is its own.
    registered: bool = False
    # This run's current registration (its payload and event id), and how
    # many registrations of this run were folded (the next one's boot id
    # follows from it).
    registration: events_pb2.AgentRegistered | None = None
    registration_event_id: str = ""
    registrations: int = 0
    # The current registration was declared lost: kill everything, register again.
    lost: bool = False
    # Where each agent's processes are reached, as it last registered (its
    # address, else its host name): for placements that carry none.
    addresses: dict[str, str] = field(default_factory=dict)


AGENT_FOLDS = (
    "agent_registered",
    "agent_lost",
    "allocation_requested",
    "allocation_assigned",
    "allocation_canceled",
    "allocation_stop_requested",
    "allocation_stop_withdrawn",
    "allocation_kill_requested",
    "allocation_ready",
    "allocation_exited",
    "allocation_resources_exited",
)


class AgentCore(PureCore[AgentState]):
    """The core of one run of agent `agent_id`, whose registration was
    appended with `boot_id` (none: a replay that is no run's own). `adopted`:
    the allocations whose containers an earlier run left running; those still
    open when this run registers are this run's (reattached), not orphaned."""

    def __init__(self, agent_id: str, boot_id: str = "", adopted: frozenset[str] = frozenset()) -> None:
        super().__init__(
            AGENT_FOLDS,
            AgentState,
            functools.partial(evolve, agent_id, boot_id, adopted),
            functools.partial(decide, agent_id, boot_id),
        )
        self.agent_id = agent_id


def run_boot_id(boot_id: str, registrations: int) -> str:
    """The boot id of this run's registration after `registrations` of its own
    (the first is `boot_id`; one more after each AgentLost)."""
    return boot_id if registrations == 0 else f"{boot_id}-{registrations}"


def evolve(
    agent_id: str, boot_id: str, adopted: frozenset[str], state: AgentState, envelope: Envelope
) -> AgentState:
    event = payload_of(envelope)
    match event:
        case events_pb2.AgentRegistered():
            addresses = {**state.addresses, event.agent_id: event.address or event.hostname}
            state = replace(state, addresses=addresses)
            if event.agent_id != agent_id:
                return state
            orphaned = {k: replace(v, orphaned=True) for k, v in state.allocations.items()}
            state = replace(state, allocations=orphaned)
            own = registration_id(agent_id, run_boot_id(boot_id, state.registrations))
            if not boot_id or envelope.event_id != own:
                return state
            if state.registrations == 0:  # this run's first: what it reattaches stays open
                kept = {k: replace(v, orphaned=k not in adopted) for k, v in state.allocations.items()}
                state = replace(state, allocations=kept)
            return replace(
                state,
                registered=True,
                registration=event,
                registration_event_id=envelope.event_id,
                registrations=state.registrations + 1,
                lost=False,
            )
        case events_pb2.AgentLost() if (
            event.agent_id == agent_id
            and state.registration_event_id
            and event.registration_event_id == state.registration_event_id
        ):
            return replace(state, lost=True)
        case events_pb2.AllocationRequested() if event.WhichOneof("spec") is not None:
            pending = PendingRequest(event, envelope.event_id, envelope.correlation_id)
            return replace(state, pending={**state.pending, event.allocation_id: pending})
        case events_pb2.AllocationAssigned():
            return _on_assigned(agent_id, state, event, envelope)
        case events_pb2.AllocationCanceled():
            return replace(
                state, pending={k: v for k, v in state.pending.items() if k != event.allocation_id}
            )
        case events_pb2.AllocationStopRequested() | events_pb2.AllocationStopWithdrawn():
            return _stops_changed(state, event, envelope.event_id)
        case events_pb2.AllocationKillRequested():
            return _update(state, event.allocation_id, kill_requested=True)
        case events_pb2.AllocationReady() if event.allocation_id in state.allocations:
            return _update(state, event.allocation_id, ready=True)
        case events_pb2.AllocationExited() if event.allocation_id in state.allocations:
            allocations = {k: v for k, v in state.allocations.items() if k != event.allocation_id}
            return replace(state, allocations=allocations)
        case events_pb2.AllocationResourcesExited() if (
            event.agent_id == agent_id and event.allocation_id in state.allocations
        ):
            allocation = replace(state.allocations[event.allocation_id], part_exited=True)
            return replace(state, allocations={**state.allocations, event.allocation_id: allocation})
    return state


def _on_assigned(
    agent_id: str, state: AgentState, event: events_pb2.AllocationAssigned, envelope: Envelope
) -> AgentState:
    request = state.pending.get(event.allocation_id)
    state = replace(state, pending={k: v for k, v in state.pending.items() if k != event.allocation_id})
    ranks = [rank for rank, p in enumerate(event.placements) if p.agent_id == agent_id]
    if request is None or not ranks:
        return state
    placements = event.placements
    allocation = AgentAllocation(
        request.requested,
        agent_id,
        tuple(placements[ranks[0]].slot_ids),
        stops=request.stops,
        kill_requested=request.kill_requested,
        assigned_event_id=envelope.event_id,
        correlation_id=envelope.correlation_id or request.correlation_id,
        container_rank=ranks[0],
        container_addrs=tuple(p.address or state.addresses.get(p.agent_id, "") for p in placements),
        container_slot_counts=tuple(len(p.slot_ids) for p in placements),
    )
    return replace(state, allocations={**state.allocations, event.allocation_id: allocation})


def _stops_changed(
    state: AgentState,
    event: events_pb2.AllocationStopRequested | events_pb2.AllocationStopWithdrawn,
    event_id: str,
) -> AgentState:
    held = state.pending.get(event.allocation_id) or state.allocations.get(event.allocation_id)
    if held is None:
        return state
    return _update(state, event.allocation_id, stops=held.stops.folded(event_id, event))


def _update(state: AgentState, allocation_id: str, **changes: Any) -> AgentState:
    """Flags a pending request or one of this agent's allocations."""
    if allocation_id in state.pending:
        pending = replace(state.pending[allocation_id], **changes)
        return replace(state, pending={**state.pending, allocation_id: pending})
    if allocation_id in state.allocations:
        allocation = replace(state.allocations[allocation_id], **changes)
        return replace(state, allocations={**state.allocations, allocation_id: allocation})
    return state


def decide(agent_id: str, boot_id: str, state: AgentState) -> list[Append]:
    """Closes what earlier runs (or registrations) left open, save the parts
    of multi-agent allocations that already ended (the scheduler closes
    those); registers again when this run's registration was declared lost."""
    appends = [
        allocation.answer(
            allocation_exited(allocation, AGENT_RESTARTED_EXIT_CODE, error=AGENT_RESTARTED, agent_lost=True)
        )
        for allocation in state.allocations.values()
        if allocation.orphaned and not allocation.part_exited
    ]
    if state.lost and state.registration is not None:
        msg_id = registration_id(agent_id, run_boot_id(boot_id, state.registrations))
        appends.append(Append(aggregate("agent", agent_id), state.registration, msg_id))
    return appends


def part_ended(
    allocation: AgentAllocation, exit_code: int, *, killed: bool = False, error: str = "", fatal: bool = False
) -> Append:
    """The end of this agent's part of the allocation: the allocation's exit
    when it runs on this agent only, else this part's (AllocationResourcesExited,
    one per agent; the scheduler closes the allocation). `fatal`: the trial
    said why (`error`) a restart cannot help."""
    if not allocation.multi_agent:
        return allocation_exited(allocation, exit_code, killed=killed, error=error, fatal=fatal)
    event = events_pb2.AllocationResourcesExited(
        allocation_id=allocation.allocation_id,
        task_id=allocation.requested.task_id,
        agent_id=allocation.agent_id,
        exit_code=exit_code,
        killed=killed,
        error=error,
        trial_id=allocation.launch.trial_id,
        experiment_id=allocation.launch.experiment_id,
        fatal=fatal,
    )
    return Append(
        aggregate("allocation", allocation.allocation_id),
        event,
        f"allocation-resources-exited-{allocation.allocation_id}-{allocation.agent_id}",
    )


def allocation_exited(
    allocation: AgentAllocation,
    exit_code: int,
    *,
    killed: bool = False,
    error: str = "",
    agent_lost: bool = False,
    fatal: bool = False,
) -> Append:
    """The one exit of an allocation (its msg id makes a second one a no-op)."""
    event = events_pb2.AllocationExited(
        allocation_id=allocation.allocation_id,
        trial_id=allocation.launch.trial_id,
        experiment_id=allocation.launch.experiment_id,
        agent_id=allocation.agent_id,
        exit_code=exit_code,
        killed=killed,
        error=error,
        task_id=allocation.requested.task_id,
        agent_lost=agent_lost,
        fatal=fatal,
    )
    return Append(
        aggregate("allocation", allocation.allocation_id),
        event,
        f"allocation-exited-{allocation.allocation_id}",
    )


def allocation_started(allocation: AgentAllocation, pid: int) -> Append:
    event = events_pb2.AllocationStarted(
        allocation_id=allocation.allocation_id,
        trial_id=allocation.launch.trial_id,
        agent_id=allocation.agent_id,
        pid=pid,
    )
    return Append(
        aggregate("allocation", allocation.allocation_id),
        event,
        f"allocation-started-{allocation.allocation_id}",
    )


def allocation_ready(allocation: AgentAllocation, proxy_address: str) -> Append:
    """The task's server answers at `proxy_address` ("host:port")."""
    event = events_pb2.AllocationReady(
        allocation_id=allocation.allocation_id,
        task_id=allocation.requested.task_id,
        agent_id=allocation.agent_id,
        proxy_address=proxy_address,
    )
    return Append(
        aggregate("allocation", allocation.allocation_id),
        event,
        f"allocation-ready-{allocation.allocation_id}",
    )


def idle_kill_requested(allocation: AgentAllocation, reason: str) -> Append:
    """The agent stops a notebook that was idle too long (`idle.py` says why)."""
    event = events_pb2.AllocationKillRequested(
        allocation_id=allocation.allocation_id,
        task_id=allocation.requested.task_id,
        agent_id=allocation.agent_id,
        reason=reason,
    )
    return Append(
        aggregate("allocation", allocation.allocation_id),
        event,
        f"allocation-kill-idle-{allocation.allocation_id}",
    )


def agent_registered(
    agent_id: str,
    hostname: str,
    slots: list[events_pb2.Slot],
    boot_id: str,
    *,
    resource_pool: str = "",
    address: str = "",
    runtime: str = PROCESS,
) -> Append:
    """A registration per start of the agent: `boot_id` is new each start.
    `runtime`: how it runs allocations, "process" or "docker"."""
    event = events_pb2.AgentRegistered(
        agent_id=agent_id,
        hostname=hostname,
        slots=slots,
        resource_pool=resource_pool,
        address=address,
        runtime=runtime,
    )
    return Append(aggregate("agent", agent_id), event, registration_id(agent_id, boot_id))


def registration_id(agent_id: str, boot_id: str) -> str:
    """The msg id, so the event id, of one run's registration."""
    return f"agent-registered-{agent_id}-{boot_id}"
