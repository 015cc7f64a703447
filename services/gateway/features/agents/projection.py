"""How events change the agents' rows (pure; see plan.py and projection.py
for the fold)."""

import json

from determined.proto import events_pb2
from services.common.envelope import Envelope
from services.common.trial_runtime import runtime_of
from services.gateway.features.agents.tables import agents
from services.gateway.features.feature import Feature
from services.gateway.plan import Plan, Row, replaced, updated


def _agent_registered(plan: Plan, envelope: Envelope) -> None:
    """A (new) run of the agent: what it offers, and no longer lost; whether an
    operator disabled it stays as it was. Its event id names the registration
    (AgentLost says which one it found lost)."""
    payload = envelope.agent_registered
    row = {
        "agent_id": payload.agent_id,
        "hostname": payload.hostname,
        "slots": json.dumps([_slot(s) for s in payload.slots]),
        "registered_at_ns": envelope.occurred_at_ns,
        "resource_pool": payload.resource_pool,
        "address": payload.address,
        "runtime": runtime_of(payload.runtime),
        "state": "ENABLED",
        "registration_event_id": envelope.event_id,
        "lost": False,
        "disabled_slots": "{}",
    }
    plan.change("agents", payload.agent_id, replaced(row, kept=("state", "disabled_slots")))


def _agent_lost(plan: Plan, payload: events_pb2.AgentLost, at: int) -> None:
    plan.change("agents", payload.agent_id, (_lose_agent, (payload.registration_event_id,)))


def _agent_disabled(plan: Plan, payload: events_pb2.AgentDisabled, at: int) -> None:
    plan.change("agents", payload.agent_id, updated(state="DRAINING" if payload.drain else "DISABLED"))


def _agent_enabled(plan: Plan, payload: events_pb2.AgentEnabled, at: int) -> None:
    plan.change("agents", payload.agent_id, updated(state="ENABLED"))


def _slot_disabled(plan: Plan, payload: events_pb2.SlotDisabled, at: int) -> None:
    state = "DRAINING" if payload.drain else "DISABLED"
    plan.change("agents", payload.agent_id, (_set_slot, (payload.slot_id, state)))


def _slot_enabled(plan: Plan, payload: events_pb2.SlotEnabled, at: int) -> None:
    plan.change("agents", payload.agent_id, (_set_slot, (payload.slot_id, "ENABLED")))


def _set_slot(row: Row | None, slot_id: int, state: str) -> Row | None:
    """The slot's state in the agent's `disabled_slots` (an enabled slot leaves it)."""
    if row is not None:
        disabled = json.loads(row["disabled_slots"])
        disabled.pop(str(slot_id), None)
        if state != "ENABLED":
            disabled[str(slot_id)] = state
        row["disabled_slots"] = json.dumps(disabled, sort_keys=True)
    return row


def _lose_agent(row: Row | None, registration_event_id: str) -> Row | None:
    """Lost, when the registration found lost is its current one (a newer
    registration may be stored before the scheduler's verdict on the old one)."""
    if row is not None and row["registration_event_id"] == registration_event_id:
        row["lost"] = True
    return row


def _slot(slot: events_pb2.Slot) -> dict[str, object]:
    return {"slot_id": slot.slot_id, "type": slot.type, "device": slot.device}


FEATURE = Feature(
    "agents",
    row_tables=(agents,),
    rules={
        "agent_lost": _agent_lost,
        "agent_disabled": _agent_disabled,
        "agent_enabled": _agent_enabled,
        "slot_disabled": _slot_disabled,
        "slot_enabled": _slot_enabled,
    },
    envelope_rules={"agent_registered": _agent_registered},
)
