"""Which agents are lost: a pure decision over what the scheduler's liveness
monitor heard (services/common/heartbeats.py) and the scheduler's state.

An agent's run (its current registration) is alive while the monitor has
heard from it within the timeout. Silence counts only from the latest of:
its newest heartbeat, the moment the monitor first saw the registration (an
agent that just registered may not have sent one yet), and the moment the
monitor could last start hearing (its start, or the end of its own NATS
outage): every agent gets a grace of the timeout from then. Heartbeats of an
older registration of the same agent say nothing about the current one. An
agent already lost stays so, and is not lost again, until it registers anew.
"""

from collections.abc import Mapping
from typing import Protocol

from determined.proto import events_pb2
from services.common.envelope import Append, aggregate


class RegisteredAgent(Protocol):
    """What liveness reads of an agent (the scheduler's AgentView)."""

    @property
    def registration_event_id(self) -> str: ...

    @property
    def lost(self) -> bool: ...


def lost_agents(
    agents: Mapping[str, RegisteredAgent],
    heartbeats: Mapping[tuple[str, str], int],
    registered_ns: Mapping[str, int],
    hearing_since_ns: int,
    now_ns: int,
    timeout_ns: int,
) -> list[Append]:
    """AgentLost for each agent, in agent id order, silent for `timeout_ns` or
    more at `now_ns`. `heartbeats`: (agent id, registration event id) -> when
    its newest heartbeat arrived; `registered_ns`: registration event id ->
    when the monitor first saw it (one it has not seen counts as seen now);
    `hearing_since_ns`: since when the monitor has heard every heartbeat."""
    appends = []
    for agent_id in sorted(agents):
        agent = agents[agent_id]
        if agent.lost:
            continue
        registration = agent.registration_event_id
        last_heartbeat_ns = heartbeats.get((agent_id, registration), 0)
        silent_since_ns = max(last_heartbeat_ns, registered_ns.get(registration, now_ns), hearing_since_ns)
        if now_ns - silent_since_ns >= timeout_ns:
            appends.append(_agent_lost(agent_id, registration, last_heartbeat_ns, now_ns - silent_since_ns))
    return appends


def _agent_lost(agent_id: str, registration_event_id: str, last_heartbeat_ns: int, silent_ns: int) -> Append:
    reason = f"no heartbeat for {silent_ns / 1e9:.1f} s"
    event = events_pb2.AgentLost(
        agent_id=agent_id,
        registration_event_id=registration_event_id,
        last_heartbeat_ns=last_heartbeat_ns,
        reason=reason,
    )
    return Append(aggregate("agent", agent_id), event, f"agent-lost-{registration_event_id}")
