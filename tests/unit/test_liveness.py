"""Which agents the scheduler's liveness monitor declares lost (pure)."""

import pytest

from determined.proto import events_pb2 as ev
from services.common.envelope import Append
from services.scheduler.liveness import lost_agents
from services.scheduler.state import AgentView

S = 1_000_000_000
TIMEOUT = 10 * S
START = 1_000 * S


def view(registration: str = "reg-a-1", *, lost: bool = False) -> AgentView:
    return AgentView(
        slot_ids=(0, 1),
        resource_pool="default",
        address="host",
        registration_event_id=registration,
        lost=lost,
    )


def lost(
    agents: dict[str, AgentView],
    now: int,
    heartbeats: dict[tuple[str, str], int] | None = None,
    registered: dict[str, int] | None = None,
    hearing_since: int = START,
) -> list[Append]:
    """lost_agents with every registration seen at START unless told."""
    seen = {a.registration_event_id: START for a in agents.values()} | (registered or {})
    return lost_agents(agents, heartbeats or {}, seen, hearing_since, now, TIMEOUT)


def lost_ids(appends: list[Append]) -> list[str]:
    return [a.payload.agent_id for a in appends]


# -- grace from the monitor's start --------------------------------------------------


@pytest.mark.parametrize(
    "elapsed, is_lost", [(0, False), (TIMEOUT - 1, False), (TIMEOUT, True), (5 * TIMEOUT, True)]
)
def test_an_agent_never_heard_is_lost_only_after_the_timeout_from_the_monitors_start(
    elapsed: int, is_lost: bool
) -> None:
    assert lost_ids(lost({"a": view()}, START + elapsed)) == (["a"] if is_lost else [])


def test_a_heartbeat_older_than_the_monitors_start_gives_no_less_grace() -> None:
    heartbeats = {("a", "reg-a-1"): START - 100 * S}
    assert lost({"a": view()}, START + TIMEOUT - 1, heartbeats) == []


def test_an_agent_that_registers_later_gets_its_grace_from_when_it_was_seen() -> None:
    registered = {"reg-a-1": START + 100 * S}
    assert lost({"a": view()}, START + 100 * S + TIMEOUT - 1, registered=registered) == []
    assert lost_ids(lost({"a": view()}, START + 100 * S + TIMEOUT, registered=registered)) == ["a"]


def test_a_registration_not_yet_seen_counts_as_seen_now() -> None:
    agents = {"a": view()}
    assert lost_agents(agents, {}, {}, START, START + 100 * TIMEOUT, TIMEOUT) == []


def test_the_end_of_the_monitors_own_outage_restarts_every_grace() -> None:
    heartbeats = {("a", "reg-a-1"): START + S}
    since = START + 50 * S  # hearing again from here
    assert lost({"a": view()}, since + TIMEOUT - 1, heartbeats, hearing_since=since) == []
    assert lost_ids(lost({"a": view()}, since + TIMEOUT, heartbeats, hearing_since=since)) == ["a"]


# -- heartbeats ---------------------------------------------------------------------


def test_a_recent_heartbeat_keeps_an_agent_alive() -> None:
    heartbeats = {("a", "reg-a-1"): START + 30 * S}
    assert lost({"a": view()}, START + 30 * S + TIMEOUT - 1, heartbeats) == []


def test_a_stale_heartbeat_loses_the_agent_with_when_it_was_last_heard() -> None:
    heartbeats = {("a", "reg-a-1"): START + 30 * S}
    [append] = lost({"a": view()}, START + 42 * S + 500_000_000, heartbeats)
    assert append.aggregate == "agent/a"
    assert append.msg_id == "agent-lost-reg-a-1"
    assert append.payload == ev.AgentLost(
        agent_id="a",
        registration_event_id="reg-a-1",
        last_heartbeat_ns=START + 30 * S,
        reason="no heartbeat for 12.5 s",
    )


def test_a_lost_agent_never_heard_reports_no_last_heartbeat() -> None:
    [append] = lost({"a": view()}, START + TIMEOUT)
    assert append.payload.last_heartbeat_ns == 0
    assert append.payload.reason == "no heartbeat for 10.0 s"


def test_a_heartbeat_from_an_older_registration_does_not_count() -> None:
    heartbeats = {("a", "reg-a-1"): START + 30 * S}
    [append] = lost({"a": view("reg-a-2")}, START + 30 * S, heartbeats)
    assert append.msg_id == "agent-lost-reg-a-2"
    assert append.payload.last_heartbeat_ns == 0


def test_a_heartbeat_naming_another_agent_does_not_count() -> None:
    heartbeats = {("b", "reg-a-1"): START + 30 * S}
    assert lost_ids(lost({"a": view()}, START + 30 * S, heartbeats)) == ["a"]


# -- lost, and registered again -----------------------------------------------------------


def test_an_agent_already_lost_is_not_lost_again() -> None:
    assert lost({"a": view(lost=True)}, START + 100 * TIMEOUT) == []


def test_a_reregistered_agent_counts_again() -> None:
    agents = {"a": view("reg-a-2")}
    registered = {"reg-a-1": START, "reg-a-2": START + 60 * S}
    heartbeats = {("a", "reg-a-1"): START + 5 * S, ("a", "reg-a-2"): START + 65 * S}
    assert lost(agents, START + 65 * S + TIMEOUT - 1, heartbeats, registered) == []
    assert [a.msg_id for a in lost(agents, START + 65 * S + TIMEOUT, heartbeats, registered)] == [
        "agent-lost-reg-a-2"
    ]


def test_only_the_silent_agents_are_lost_in_agent_id_order() -> None:
    agents = {"c": view("reg-c"), "a": view("reg-a"), "b": view("reg-b"), "d": view("reg-d", lost=True)}
    heartbeats = {("b", "reg-b"): START + 25 * S}
    assert lost_ids(lost(agents, START + 30 * S, heartbeats)) == ["a", "c"]


def test_no_agents_none_lost() -> None:
    assert lost({}, START + 100 * TIMEOUT) == []
