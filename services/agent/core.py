"""The agent's pure core: the allocations assigned to this agent and what
became of them.

It decides one thing itself: an allocation assigned before this agent's
latest registration (a previous run of the agent) that never exited has no
process any more, so it is closed as "agent restarted" and the scheduler
retries it. Starting and killing processes is the shell's business
(`runner.py`), driven by this state.
"""

from dataclasses import dataclass, field, replace

from determined.proto import events_pb2
from services.common.envelope import Append, Envelope, aggregate, payload_of

AGENT_RESTARTED = "agent restarted"
AGENT_RESTARTED_EXIT_CODE = -1


@dataclass(frozen=True)
class AgentAllocation:
    assigned: events_pb2.AllocationAssigned
    # Assigned to an earlier run of this agent: its process is gone.
    orphaned: bool = False
    kill_requested: bool = False
    # The assignment's event id and correlation id: the agent's events about
    # this allocation answer it, so an operator can follow the chain.
    assigned_event_id: str = ""
    correlation_id: str = ""

    @property
    def allocation_id(self) -> str:
        return self.assigned.allocation_id

    def answer(self, append: Append) -> Append:
        """`append` as an answer to this allocation's assignment."""
        return replace(append, causation_id=self.assigned_event_id, correlation_id=self.correlation_id)


@dataclass(frozen=True)
class AgentState:
    # Allocations of this agent that have not exited.
    allocations: dict[str, AgentAllocation] = field(default_factory=dict)


@dataclass
class AgentCore:
    agent_id: str
    kinds: list[str] = field(default_factory=lambda: ["agent", "allocation"])

    def initial_state(self) -> AgentState:
        return AgentState()

    def evolve(self, state: AgentState, envelope: Envelope) -> AgentState:
        return evolve(self.agent_id, state, envelope)

    def decide(self, state: AgentState) -> list[Append]:
        return decide(state)


def evolve(agent_id: str, state: AgentState, envelope: Envelope) -> AgentState:
    event = payload_of(envelope)
    match event:
        case events_pb2.AgentRegistered() if event.agent_id == agent_id:
            orphaned = {k: replace(v, orphaned=True) for k, v in state.allocations.items()}
            return replace(state, allocations=orphaned)
        case events_pb2.AllocationAssigned() if event.agent_id == agent_id:
            allocation = AgentAllocation(
                event, assigned_event_id=envelope.event_id, correlation_id=envelope.correlation_id
            )
            return replace(state, allocations={**state.allocations, event.allocation_id: allocation})
        case events_pb2.AllocationKillRequested() if event.allocation_id in state.allocations:
            killed = replace(state.allocations[event.allocation_id], kill_requested=True)
            return replace(state, allocations={**state.allocations, event.allocation_id: killed})
        case events_pb2.AllocationExited() if event.allocation_id in state.allocations:
            allocations = {k: v for k, v in state.allocations.items() if k != event.allocation_id}
            return replace(state, allocations=allocations)
    return state


def decide(state: AgentState) -> list[Append]:
    return [
        allocation.answer(
            allocation_exited(allocation.assigned, AGENT_RESTARTED_EXIT_CODE, error=AGENT_RESTARTED)
        )
        for allocation in state.allocations.values()
        if allocation.orphaned
    ]


def allocation_exited(
    assigned: events_pb2.AllocationAssigned, exit_code: int, *, killed: bool = False, error: str = ""
) -> Append:
    """The one exit of an allocation (its msg id makes a second one a no-op)."""
    event = events_pb2.AllocationExited(
        allocation_id=assigned.allocation_id,
        trial_id=assigned.trial_id,
        experiment_id=assigned.experiment_id,
        agent_id=assigned.agent_id,
        exit_code=exit_code,
        killed=killed,
        error=error,
    )
    return Append(
        aggregate("allocation", assigned.allocation_id), event, f"allocation-exited-{assigned.allocation_id}"
    )


def allocation_started(assigned: events_pb2.AllocationAssigned, pid: int) -> Append:
    event = events_pb2.AllocationStarted(
        allocation_id=assigned.allocation_id, trial_id=assigned.trial_id, agent_id=assigned.agent_id, pid=pid
    )
    return Append(
        aggregate("allocation", assigned.allocation_id), event, f"allocation-started-{assigned.allocation_id}"
    )


def agent_registered(agent_id: str, hostname: str, slots: list[events_pb2.Slot], boot_id: str) -> Append:
    """A registration per start of the agent: `boot_id` is new each start."""
    event = events_pb2.AgentRegistered(agent_id=agent_id, hostname=hostname, slots=slots)
    return Append(aggregate("agent", agent_id), event, f"agent-registered-{agent_id}-{boot_id}")
