"""The scheduler's slot rules (det slot disable|enable): nothing new is placed
on a disabled slot; without drain the allocation on it is asked to stop, with
drain it finishes; enabling takes the slot back; an agent's restart keeps its
disabled slots; every combination of a slot's state and an allocation on it."""

import itertools

import pytest
from test_scheduler_rules import Run, agent, exited, placed, requested

from determined.proto import events_pb2 as ev


def disable(slot: int, agent_id: str = "a", drain: bool = False) -> ev.SlotDisabled:
    return ev.SlotDisabled(agent_id=agent_id, slot_id=slot, drain=drain)


def enable(slot: int, agent_id: str = "a") -> ev.SlotEnabled:
    return ev.SlotEnabled(agent_id=agent_id, slot_id=slot)


def test_nothing_new_is_placed_on_a_disabled_slot() -> None:
    run = Run().given(agent("a", 3), disable(0), disable(2, drain=True))
    run.given(requested("1.1", slots=1), requested("2.1", slots=2, experiment=2))
    assert placed(run.settle()) == {"1.1": [("a", [1])]}
    assert run.queue()["experiment/2"][2] == "QUEUED"


def test_a_gang_goes_around_the_disabled_slots() -> None:
    run = Run().given(agent("a", 4), agent("b", 2), disable(1), disable(0, agent_id="b", drain=True))
    run.given(requested("1.1", slots=4))
    assert placed(run.settle()) == {"1.1": [("a", [0, 2, 3]), ("b", [1])]}


STATES = ("enabled", "disabled", "draining")


def slot_state(state: str, slot: int) -> list[ev.SlotDisabled]:
    return [] if state == "enabled" else [disable(slot, drain=state == "draining")]


@pytest.mark.parametrize(("first", "second"), list(itertools.product(STATES, STATES)))
def test_an_allocation_is_stopped_when_one_of_its_slots_is_disabled_without_drain(
    first: str, second: str
) -> None:
    run = Run().given(agent("a", 2), requested("1.1", slots=2))
    assert placed(run.settle()) == {"1.1": [("a", [0, 1])]}
    run.given(*slot_state(first, 0), *slot_state(second, 1))
    decided = run.settle()
    stopped = [slot for slot, state in ((0, first), (1, second)) if state == "disabled"]
    if not stopped:
        assert decided == []
        return
    [stop] = decided
    assert (stop.msg_id, stop.payload.reason) == (
        "allocation-stop-slot-disabled-1.1",
        f"slot {stopped[0]} of agent a disabled",
    )
    assert run.decide() == []  # asked once: a stopping allocation is not asked again


def test_draining_then_disabling_stops_and_enabling_takes_the_slot_back() -> None:
    run = Run().given(agent("a", 1), requested("1.1"))
    run.settle()
    run.given(disable(0, drain=True))
    assert run.decide() == []
    run.given(disable(0))
    assert [a.msg_id for a in run.settle()] == ["allocation-stop-slot-disabled-1.1"]
    run.given(exited("1.1"), requested("2.1", experiment=2))
    assert run.settle() == []
    run.given(enable(0))
    assert placed(run.settle()) == {"2.1": [("a", [0])]}


def test_the_agent_s_own_disable_is_the_reason_given_first() -> None:
    run = Run().given(agent("a", 1), requested("1.1"))
    run.settle()
    run.given(disable(0), ev.AgentDisabled(agent_id="a"))
    assert [a.payload.reason for a in run.settle()] == ["agent a disabled"]


def test_a_restart_keeps_the_disabled_slots() -> None:
    run = Run().given(agent("a", 2), disable(1, drain=True))
    run.given(agent("a", 2))
    view = run.state.agents["a"]
    assert (view.disabled_slots, view.draining_slots, view.stopped_slots) == ({1}, {1}, frozenset())
    run.given(enable(1), enable(1))
    assert (run.state.agents["a"].disabled_slots, run.state.agents["a"].draining_slots) == (set(), set())


def test_slots_of_an_unknown_agent_change_nothing() -> None:
    run = Run().given(agent("a", 1))
    before = run.state
    run.given(disable(0, agent_id="ghost"), enable(0, agent_id="ghost"))
    assert run.state.agents == before.agents
