"""`det agent enable|disable` and `det slot enable|disable` turned into
events (pure). Message ids: `agent-enable-<agent>-<version>`,
`agent-disable-<agent>-<version>`, `slot-<state>-<agent>-<slot>-<version>`
(version: the agent's last event)."""

from determined.proto import events_pb2
from services.common.envelope import Append, aggregate
from services.gateway.features.commands import Unchanged


def agent_enabled(agent_id: str, state: str, owner: str, version: int) -> Append | Unchanged:
    """`det agent enable`: the agent takes work again; Unchanged when it is
    enabled already. `state`: ENABLED, DISABLED or DRAINING; `version`: the
    agent aggregate's last sequence (a repeated request is stored once)."""
    if state == "ENABLED":
        return Unchanged(f"Agent {agent_id} is already enabled: nothing to do")
    payload = events_pb2.AgentEnabled(agent_id=agent_id, owner=owner)
    return Append(aggregate("agent", agent_id), payload, f"agent-enable-{agent_id}-{version}", version)


def agent_disabled(agent_id: str, state: str, drain: bool, owner: str, version: int) -> Append | Unchanged:
    """`det agent disable [--drain]`: nothing new is placed on it; without
    drain its running work is asked to stop. Unchanged when it is disabled that
    way already (disabling a draining agent without --drain stops its work)."""
    wanted = "DRAINING" if drain else "DISABLED"
    if state == wanted:
        how = "draining" if drain else "disabled"
        return Unchanged(f"Agent {agent_id} is already {how}: nothing to do")
    payload = events_pb2.AgentDisabled(agent_id=agent_id, drain=drain, owner=owner)
    return Append(aggregate("agent", agent_id), payload, f"agent-disable-{agent_id}-{version}", version)


def slot_changed(agent_id: str, slot_id: int, state: str, wanted: str, version: int) -> Append | Unchanged:
    """`det slot enable|disable [--drain] AGENT SLOT`: `state` the slot's now
    (ENABLED, DISABLED or DRAINING), `wanted` what is asked. Unchanged when
    the slot is that already; message id `slot-<wanted>-<agent>-<slot>-<version>`."""
    if state == wanted:
        return Unchanged(f"Slot {slot_id} of agent {agent_id} is already {wanted.lower()}: nothing to do")
    payload: events_pb2.SlotEnabled | events_pb2.SlotDisabled
    if wanted == "ENABLED":
        payload = events_pb2.SlotEnabled(agent_id=agent_id, slot_id=slot_id)
    else:
        payload = events_pb2.SlotDisabled(agent_id=agent_id, slot_id=slot_id, drain=wanted == "DRAINING")
    msg_id = f"slot-{wanted.lower()}-{agent_id}-{slot_id}-{version}"
    return Append(aggregate("agent", agent_id), payload, msg_id, version)
