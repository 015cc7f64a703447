"""The agent's pure core and its launch contract (command line, environment)."""

import itertools
import json
from pathlib import Path

import pytest
from google.protobuf.message import Message
from support import pure_core

from determined.common.ports import allocation_ports
from determined.proto import events_pb2 as ev
from services.agent.core import (
    AGENT_RESTARTED,
    AGENT_RESTARTED_EXIT_CODE,
    AgentAllocation,
    AgentCore,
    AgentState,
    agent_registered,
    allocation_exited,
    allocation_started,
    part_ended,
    registration_id,
    run_boot_id,
)
from services.agent.launch import AgentIdentity, EntrypointError, entrypoint_argv, trial_environment
from services.agent.slots import detect_slots
from services.common.envelope import Append, Envelope, aggregate, wrap

core = AgentCore("a")
_event_ids = itertools.count()


def envelope(payload: Message, event_id: str | None = None, correlation_id: str = "") -> Envelope:
    key = "agent_id" if isinstance(payload, ev.AgentRegistered | ev.AgentLost) else "allocation_id"
    kind = "agent" if key == "agent_id" else "allocation"
    append = Append(
        aggregate(kind, getattr(payload, key)),
        payload,
        event_id or f"given-{next(_event_ids)}",
        correlation_id=correlation_id,
    )
    return wrap(append, actor="test", occurred_at_ns=0)


def given(*payloads: Message | Envelope, state: AgentState | None = None) -> AgentState:
    state = state or core.initial_state()
    for payload in payloads:
        state = core.evolve(state, payload if isinstance(payload, Envelope) else envelope(payload))
    return state


def settle(state: AgentState) -> tuple[AgentState, list[Append]]:
    return pure_core.settle(core, state, given)


def registered(agent_id: str = "a") -> ev.AgentRegistered:
    return ev.AgentRegistered(agent_id=agent_id, hostname=agent_id, slots=[ev.Slot(slot_id=0, type="cpu")])


def requested(allocation_id: str, slots: int = 1, **launch: object) -> ev.AllocationRequested:
    task_id, _, run = allocation_id.partition(".")
    fields: dict[str, object] = {
        "experiment_id": 4,
        "trial_id": int(task_id),
        "trial_run_id": int(run),
        **launch,
    }
    return ev.AllocationRequested(
        allocation_id=allocation_id,
        task_id=task_id,
        task_type="TRIAL",
        slots=slots,
        job_id="experiment/4",
        trial=ev.TrialLaunch(**fields),
    )


def assigned(allocation_id: str, *placements: tuple[str, list[int]] | ev.Placement) -> ev.AllocationAssigned:
    placements = placements or (("a", [0]),)
    return ev.AllocationAssigned(
        allocation_id=allocation_id,
        task_id=allocation_id.split(".")[0],
        placements=[
            p if isinstance(p, ev.Placement) else ev.Placement(agent_id=p[0], slot_ids=p[1])
            for p in placements
        ],
    )


def placed(allocation_id: str, *placements: tuple[str, list[int]]) -> list[Message]:
    """The request, then its assignment (to agent a's slot 0 unless told)."""
    return [requested(allocation_id), assigned(allocation_id, *placements)]


def exited(allocation_id: str, code: int = 0) -> ev.AllocationExited:
    return ev.AllocationExited(allocation_id=allocation_id, exit_code=code, agent_id="a")


# -- what the core keeps --------------------------------------------------------------


def test_keeps_pending_requests_until_placed_and_only_this_agents_allocations() -> None:
    state = given(
        registered(),
        requested("1.1"),
        requested("2.1"),
        requested("3.1"),
        requested("4.1"),
        assigned("1.1"),
        assigned("2.1", ("b", [0])),
    )
    assert list(state.pending) == ["3.1", "4.1"]
    assert list(state.allocations) == ["1.1"]
    state = given(ev.AllocationCanceled(allocation_id="3.1", task_id="3"), state=state)
    assert list(state.pending) == ["4.1"]
    assert core.decide(state) == []


def test_an_allocation_keeps_its_request_and_this_agents_slots() -> None:
    request = requested("7.2", slots=3, config_json='{"x": 1}', hparams_json='{"lr": 1}', searcher_length=50)
    state = given(registered(), request, assigned("7.2", ("b", [0]), ("a", [2, 3]), ("c", [1])))
    allocation = state.allocations["7.2"]
    assert allocation.requested == request and allocation.launch == request.trial
    assert (allocation.allocation_id, allocation.agent_id, allocation.slot_ids) == ("7.2", "a", (2, 3))
    assert not (allocation.orphaned or allocation.stop_requested or allocation.kill_requested)
    other = AgentCore("b")
    state_b = other.initial_state()
    for payload in (request, assigned("7.2", ("b", [0]), ("a", [2, 3]))):
        state_b = other.evolve(state_b, envelope(payload))
    assert (state_b.allocations["7.2"].agent_id, state_b.allocations["7.2"].slot_ids) == ("b", (0,))


def test_a_zero_slot_allocation_is_kept_too() -> None:
    state = given(requested("1.1", slots=0), assigned("1.1", ("a", [])))
    assert state.allocations["1.1"].slot_ids == ()


def test_stop_and_kill_requests_mark_the_allocation_and_its_exit_removes_it() -> None:
    state = given(registered(), *placed("1.1"), *placed("2.1"), *placed("3.1"))
    state = given(
        ev.AllocationStopRequested(allocation_id="1.1", task_id="1", reason="experiment paused"),
        ev.AllocationKillRequested(allocation_id="2.1", trial_id=2, task_id="2"),
        exited("3.1"),
        state=state,
    )
    assert list(state.allocations) == ["1.1", "2.1"]
    assert state.allocations["1.1"].stop_requested and not state.allocations["1.1"].kill_requested
    assert state.allocations["2.1"].kill_requested and not state.allocations["2.1"].stop_requested
    state = given(ev.AllocationKillRequested(allocation_id="1.1", trial_id=1, task_id="1"), state=state)
    assert state.allocations["1.1"].stop_requested and state.allocations["1.1"].kill_requested
    assert core.decide(state) == []
    state = given(exited("1.1", -15), exited("2.1", -15), state=state)
    assert state.allocations == {} and state.pending == {}


def test_a_kill_before_the_start_is_kept_for_the_runner() -> None:
    state = given(registered(), *placed("1.1"), ev.AllocationKillRequested(allocation_id="1.1", task_id="1"))
    assert state.allocations["1.1"].kill_requested  # the runner exits it as killed without starting it
    assert core.decide(state) == []


def test_stop_kill_and_exit_of_other_allocations_are_ignored() -> None:
    state = given(registered(), *placed("1.1"), requested("2.1"), *placed("3.1", ("b", [0])))
    before = state
    state = given(
        ev.AllocationStopRequested(allocation_id="3.1", task_id="3"),
        ev.AllocationKillRequested(allocation_id="3.1", task_id="3"),
        exited("3.1"),
        exited("9.1"),
        ev.AllocationStarted(allocation_id="1.1", pid=5),
        ev.AllocationStopAcknowledged(allocation_id="1.1", task_id="1"),
        state=state,
    )
    assert state == before


def test_a_stop_or_kill_that_reached_the_log_before_the_assignment_is_kept() -> None:
    state = given(
        registered(),
        requested("1.1"),
        requested("2.1"),
        ev.AllocationStopRequested(allocation_id="1.1", task_id="1"),
        ev.AllocationKillRequested(allocation_id="2.1", task_id="2"),
        *placed("1.1")[1:],
        *placed("2.1")[1:],
    )
    assert state.allocations["1.1"].stop_requested and not state.allocations["1.1"].kill_requested
    assert state.allocations["2.1"].kill_requested


def test_an_assignment_of_an_unknown_request_is_ignored() -> None:
    state = given(registered(), assigned("1.1"))
    assert state.allocations == {} and state.pending == {}


def test_requests_of_other_task_types_are_not_kept() -> None:
    command = ev.AllocationRequested(allocation_id="c.1", task_id="c", task_type="COMMAND", slots=1)
    state = given(registered(), command, assigned("c.1"))
    assert state.pending == {} and state.allocations == {}


def test_unknown_payloads_are_skipped() -> None:
    state = given(registered(), *placed("1.1"))
    assert core.evolve(state, Envelope(event_id="future", aggregate="allocation/1.1")) == state


# -- orphans ----------------------------------------------------------------------------


def test_a_restart_closes_what_the_previous_run_left_open() -> None:
    state = given(registered(), *placed("1.1"), *placed("2.1"))
    state = given(exited("2.1"), registered("b"), state=state)
    assert core.decide(state) == []  # another agent's registration
    state = given(registered(), *placed("3.1"), state=state)
    assert state.allocations["1.1"].orphaned and not state.allocations["3.1"].orphaned
    [append] = core.decide(state)
    closed = append.payload
    assert isinstance(closed, ev.AllocationExited)
    assert (append.aggregate, append.msg_id) == ("allocation/1.1", "allocation-exited-1.1")
    assert closed == ev.AllocationExited(
        allocation_id="1.1",
        trial_id=1,
        experiment_id=4,
        agent_id="a",
        exit_code=AGENT_RESTARTED_EXIT_CODE,
        killed=False,
        error=AGENT_RESTARTED,
        task_id="1",
        agent_lost=True,
    )
    assert (closed.exit_code, closed.error) == (-1, "agent restarted")
    state, appends = settle(state)
    assert [a.msg_id for a in appends] == ["allocation-exited-1.1"]
    assert list(state.allocations) == ["3.1"]


def test_every_open_allocation_of_an_earlier_run_is_closed_even_one_asked_to_stop_or_die() -> None:
    state = given(
        registered(),
        *placed("1.1"),
        *placed("2.1"),
        *placed("3.1"),
        ev.AllocationStopRequested(allocation_id="1.1", task_id="1"),
        ev.AllocationKillRequested(allocation_id="2.1", task_id="2"),
        registered(),
        registered(),  # restarted twice before it caught up
    )
    state, appends = settle(state)
    assert [a.msg_id for a in appends] == [
        "allocation-exited-1.1",
        "allocation-exited-2.1",
        "allocation-exited-3.1",
    ]
    assert all(a.payload.agent_lost for a in appends)
    assert state.allocations == {}


def test_a_request_placed_after_the_restart_is_not_an_orphan() -> None:
    state = given(registered(), requested("1.1"), registered(), assigned("1.1"))
    assert not state.allocations["1.1"].orphaned and core.decide(state) == []


def test_the_agents_events_answer_the_assignment() -> None:
    assignment = envelope(assigned("1.1"), event_id="allocation-assigned-1.1", correlation_id="create-4")
    state = given(registered(), requested("1.1"), assignment)
    allocation = state.allocations["1.1"]
    assert (allocation.assigned_event_id, allocation.correlation_id) == (
        "allocation-assigned-1.1",
        "create-4",
    )
    state = given(registered(), state=state)
    [append] = core.decide(state)
    assert (append.causation_id, append.correlation_id) == ("allocation-assigned-1.1", "create-4")


def test_an_assignment_without_a_correlation_takes_the_requests() -> None:
    request = envelope(requested("1.1"), event_id="allocation-requested-1.1", correlation_id="create-4")
    assignment = envelope(assigned("1.1"), event_id="allocation-assigned-1.1")
    assignment.correlation_id = ""
    state = given(request, assignment)
    assert state.allocations["1.1"].correlation_id == "create-4"


def test_an_old_shape_assignment_reads_as_its_request_and_placement() -> None:
    old = ev.AllocationAssigned(
        allocation_id="7.2",
        trial_id=7,
        experiment_id=3,
        agent_id="a",
        slot_ids=[0, 1],
        trial_run_id=2,
        config_json='{"entrypoint": "python3 train.py"}',
        hparams_json='{"lr": 1}',
        context_hash="ctx",
        trial_seed=9,
        latest_checkpoint="ck-1",
        steps_completed=100,
        owner="alice",
    )
    state = given(registered(), envelope(old, event_id="allocation-assigned-7.2", correlation_id="create-3"))
    allocation = state.allocations["7.2"]
    assert (allocation.agent_id, allocation.slot_ids) == ("a", (0, 1))
    assert (allocation.requested.task_id, allocation.requested.task_type) == ("7", "TRIAL")
    launch = allocation.launch
    assert (launch.experiment_id, launch.trial_id, launch.trial_run_id, launch.trial_seed) == (3, 7, 2, 9)
    assert (launch.latest_checkpoint, launch.steps_completed, launch.owner) == ("ck-1", 100, "alice")
    assert (allocation.assigned_event_id, allocation.correlation_id) == (
        "allocation-assigned-7.2",
        "create-3",
    )
    assert state.pending == {}
    elsewhere = ev.AllocationAssigned()
    elsewhere.CopyFrom(old)
    elsewhere.agent_id = "b"
    assert given(registered(), elsewhere).allocations == {}  # placed on another agent
    [append] = core.decide(given(registered(), state=state))
    assert (append.payload.experiment_id, append.payload.trial_id, append.payload.agent_lost) == (3, 7, True)


# -- this run of the agent, and earlier runs -----------------------------------------------


def boot(boot_id: str, agent_id: str = "a") -> Envelope:
    """A run's registration, as `agent_registered` appends it."""
    append = agent_registered(agent_id, agent_id, [ev.Slot(slot_id=0, type="cpu")], boot_id)
    return wrap(append, actor="service:agent", occurred_at_ns=0)


def run_of(boot_id: str) -> AgentCore:
    return AgentCore("a", boot_id)


def fold(core_: AgentCore, *items: Message | Envelope) -> AgentState:
    state = core_.initial_state()
    for item in items:
        state = core_.evolve(state, item if isinstance(item, Envelope) else envelope(item))
    return state


def test_a_run_is_registered_once_its_own_registration_is_folded() -> None:
    this = run_of("boot-2")
    assert not fold(this).registered
    assert not fold(this, boot("boot-1"), *placed("1.1")).registered  # an earlier run's
    assert not fold(this, boot("boot-2", agent_id="b")).registered  # another agent's, same boot id
    state = fold(this, boot("boot-1"), *placed("1.1"), boot("boot-2"))
    assert state.registered and state.allocations["1.1"].orphaned


def test_a_replay_that_says_it_caught_up_early_shows_nothing_to_start() -> None:
    """The log may be replayed up to an allocation an earlier run started
    before this run's registration is folded: not registered yet, so the
    runner starts nothing; once it is folded, the allocation is an orphan,
    closed as lost, never started twice."""
    this = run_of("boot-2")
    early = fold(this, boot("boot-1"), *placed("1.1"), ev.AllocationStarted(allocation_id="1.1", pid=7))
    assert not early.registered and not early.allocations["1.1"].orphaned
    state = this.evolve(early, boot("boot-2"))
    assert state.registered
    [append] = this.decide(state)
    assert append.payload.allocation_id == "1.1" and append.payload.agent_lost


def test_what_is_assigned_after_this_runs_registration_is_its_own() -> None:
    this = run_of("boot-2")
    state = fold(this, boot("boot-1"), requested("1.1"), boot("boot-2"), assigned("1.1"))
    assert state.registered and not state.allocations["1.1"].orphaned
    assert this.decide(state) == []


def test_a_later_run_takes_this_runs_allocations() -> None:
    """Another run with the same agent id registered after this one: this
    run's allocations are orphans (the runner kills their processes)."""
    this = run_of("boot-2")
    state = fold(this, boot("boot-2"), *placed("1.1"), boot("boot-3"))
    assert state.registered and state.allocations["1.1"].orphaned


def test_a_replay_without_a_run_is_never_registered() -> None:
    assert not fold(AgentCore("a"), boot(""), boot("boot-1"), *placed("1.1")).registered


# -- the events the runner appends -------------------------------------------------------


def allocation_of(allocation_id: str = "1.1") -> AgentAllocation:
    return given(registered(), *placed(allocation_id)).allocations[allocation_id]


def test_the_runners_events() -> None:
    allocation = allocation_of("5.2")
    started = allocation_started(allocation, 42)
    assert (started.aggregate, started.msg_id) == ("allocation/5.2", "allocation-started-5.2")
    assert started.payload == ev.AllocationStarted(allocation_id="5.2", trial_id=5, agent_id="a", pid=42)
    killed = allocation_exited(allocation, -15, killed=True)
    assert (killed.aggregate, killed.msg_id) == ("allocation/5.2", "allocation-exited-5.2")
    assert killed.payload == ev.AllocationExited(
        allocation_id="5.2",
        trial_id=5,
        experiment_id=4,
        agent_id="a",
        exit_code=-15,
        killed=True,
        task_id="5",
    )
    failed = allocation_exited(allocation, 1, error="no such context")
    assert (failed.payload.error, failed.payload.killed, failed.payload.agent_lost) == (
        "no such context",
        False,
        False,
    )
    answer = allocation.answer(killed)
    assert (answer.causation_id, answer.correlation_id) == (
        allocation.assigned_event_id,
        allocation.correlation_id,
    )
    assert answer.payload == killed.payload and answer.msg_id == killed.msg_id


def test_a_registration_per_start_of_the_agent() -> None:
    slots = [ev.Slot(slot_id=0, type="cpu", device="cpu0")]
    first = agent_registered("a", "host", slots, "boot-1")
    again = agent_registered("a", "host", slots, "boot-2")
    assert (first.aggregate, first.msg_id, again.msg_id) == (
        "agent/a",
        "agent-registered-a-boot-1",
        "agent-registered-a-boot-2",
    )
    assert first.payload == ev.AgentRegistered(agent_id="a", hostname="host", slots=slots, runtime="process")
    pooled = agent_registered(
        "a", "host", slots, "boot-1", resource_pool="gpu", address="10.0.0.1", runtime="docker"
    )
    assert (pooled.payload.resource_pool, pooled.payload.address) == ("gpu", "10.0.0.1")
    assert pooled.payload.runtime == "docker"


# -- allocations on several agents ----------------------------------------------------------


def at(agent_id: str, slots: list[int], address: str = "") -> ev.Placement:
    return ev.Placement(agent_id=agent_id, slot_ids=slots, address=address)


def gang(agent_id: str = "a") -> AgentState:
    """Allocation 1.1 on b (chief, 2 slots) then a (slots 1, 3): as agent `agent_id` sees it."""
    this = AgentCore(agent_id)
    return fold(
        this,
        requested("1.1", slots=4),
        assigned("1.1", at("b", [0, 2], "10.0.0.2"), at("a", [1, 3], "10.0.0.1")),
    )


def test_each_agent_of_a_gang_keeps_its_own_part_and_the_rank_layout() -> None:
    mine, chiefs = gang("a").allocations["1.1"], gang("b").allocations["1.1"]
    assert (mine.agent_id, mine.slot_ids, mine.container_rank) == ("a", (1, 3), 1)
    assert (chiefs.agent_id, chiefs.slot_ids, chiefs.container_rank) == ("b", (0, 2), 0)
    for part in (mine, chiefs):
        assert part.container_addrs == ("10.0.0.2", "10.0.0.1") and part.container_slot_counts == (2, 2)
        assert part.multi_agent
    assert gang("c").allocations == {}
    alone = allocation_of("2.1")
    # Its address: the host name agent a registered with.
    assert (alone.container_rank, alone.container_addrs, alone.container_slot_counts) == (0, ("a",), (1,))
    assert not alone.multi_agent


def test_a_placement_without_an_address_takes_the_agents_registered_address_or_host_name() -> None:
    state = given(
        ev.AgentRegistered(agent_id="a", hostname="host-a", address="10.0.0.1"),
        ev.AgentRegistered(agent_id="b", hostname="host-b"),
        requested("1.1", slots=3),
        assigned("1.1", at("b", [0]), at("a", [0, 1]), at("c", [5], "10.0.0.3")),
    )
    assert state.addresses == {"a": "10.0.0.1", "b": "host-b"}
    assert state.allocations["1.1"].container_addrs == ("host-b", "10.0.0.1", "10.0.0.3")


def test_a_part_of_a_gang_ends_as_its_resources_exit_and_a_lone_allocation_as_its_exit() -> None:
    part = gang("a").allocations["1.1"]
    append = part_ended(part, 1, error="boom")
    assert (append.aggregate, append.msg_id) == ("allocation/1.1", "allocation-resources-exited-1.1-a")
    assert append.payload == ev.AllocationResourcesExited(
        allocation_id="1.1", task_id="1", agent_id="a", exit_code=1, error="boom", trial_id=1, experiment_id=4
    )
    killed = part_ended(part, -15, killed=True).payload
    assert isinstance(killed, ev.AllocationResourcesExited) and killed.killed
    alone = allocation_of("2.1")
    assert part_ended(alone, -15, killed=True) == allocation_exited(alone, -15, killed=True)


def test_a_gang_stays_open_after_this_agents_part_ended_until_the_log_closes_it() -> None:
    this = AgentCore("a", "boot-1")
    placement = assigned("1.1", at("b", [0], "x"), at("a", [0], "y"))
    state = fold(this, boot("boot-1"), requested("1.1", slots=2), placement)
    assert this.decide(state) == []
    state = this.evolve(state, envelope(ev.AllocationResourcesExited(allocation_id="1.1", agent_id="b")))
    assert not state.allocations["1.1"].part_exited  # the other agent's part
    state = this.evolve(state, envelope(ev.AllocationResourcesExited(allocation_id="1.1", agent_id="a")))
    state = this.evolve(state, envelope(ev.AllocationResourcesExited(allocation_id="9.1", agent_id="a")))
    assert state.allocations["1.1"].part_exited and list(state.allocations) == ["1.1"]
    assert this.decide(state) == []
    state = this.evolve(state, envelope(ev.AllocationKillRequested(allocation_id="1.1", task_id="1")))
    assert state.allocations["1.1"].kill_requested
    state = this.evolve(state, envelope(exited("1.1", 1)))
    assert state.allocations == {}


def test_a_restart_closes_an_open_gang_unless_its_part_here_had_ended() -> None:
    """An earlier run's part that ended is the scheduler's to close (with the
    others' ends); one that did not end is lost: the whole allocation closes."""
    this = AgentCore("a", "boot-2")
    placement = [at("b", [0], "x"), at("a", [0], "y")]
    state = fold(
        this,
        boot("boot-1"),
        requested("1.1", slots=2),
        assigned("1.1", *placement),
        requested("2.1", slots=2),
        assigned("2.1", *placement),
        ev.AllocationResourcesExited(allocation_id="1.1", agent_id="a"),
        boot("boot-2"),
    )
    [append] = this.decide(state)
    assert (append.msg_id, append.payload.agent_lost) == ("allocation-exited-2.1", True)


# -- lost, and registered again -----------------------------------------------------------


def lost(registration: str, agent_id: str = "a") -> ev.AgentLost:
    return ev.AgentLost(agent_id=agent_id, registration_event_id=registration, reason="no heartbeat for 10 s")


def stored(append: Append) -> Envelope:
    return wrap(append, actor="service:agent", occurred_at_ns=0)


def test_a_run_knows_its_current_registration() -> None:
    this = run_of("boot-2")
    state = fold(this, boot("boot-1"), boot("boot-2"))
    assert (state.registration_event_id, state.registrations) == ("agent-registered-a-boot-2", 1)
    assert state.registration == ev.AgentRegistered(
        agent_id="a", hostname="a", slots=[ev.Slot(slot_id=0, type="cpu")], runtime="process"
    )
    assert fold(AgentCore("a"), boot("boot-1")).registration_event_id == ""


def test_agent_lost_of_this_runs_registration_kills_everything_and_registers_again() -> None:
    this = run_of("boot-1")
    state = fold(this, boot("boot-1"), *placed("1.1"), *placed("2.1"))
    for ignored in (lost("agent-registered-a-boot-0"), lost("agent-registered-a-boot-1", agent_id="b")):
        assert not this.evolve(state, envelope(ignored)).lost
    state = this.evolve(state, envelope(lost("agent-registered-a-boot-1")))
    assert state.lost and not any(a.orphaned for a in state.allocations.values())
    [again] = this.decide(state)
    assert (again.aggregate, again.msg_id) == ("agent/a", "agent-registered-a-boot-1-1")
    assert again.payload == state.registration
    # The scheduler closed 1.1 meanwhile; 2.1's exit did not reach the log yet.
    state = this.evolve(state, envelope(exited("1.1", -1)))
    state = this.evolve(state, stored(again))
    assert state.registered and not state.lost
    assert (state.registration_event_id, state.registrations) == ("agent-registered-a-boot-1-1", 2)
    assert state.allocations["2.1"].orphaned
    [closed] = this.decide(state)
    assert (closed.msg_id, closed.payload.agent_lost) == ("allocation-exited-2.1", True)
    state = this.evolve(state, stored(closed))
    assert this.decide(state) == []
    # Lost again: the next boot id of this run.
    state = this.evolve(state, envelope(lost("agent-registered-a-boot-1-1")))
    assert [a.msg_id for a in this.decide(state)] == ["agent-registered-a-boot-1-2"]


def test_an_old_loss_of_a_registration_that_is_no_longer_current_is_ignored() -> None:
    this = run_of("boot-1")
    state = fold(this, boot("boot-1"), lost("agent-registered-a-boot-1"))
    state = this.evolve(state, stored(this.decide(state)[0]))
    assert this.evolve(state, envelope(lost("agent-registered-a-boot-1"))) == state
    assert not fold(AgentCore("a"), boot("boot-1"), lost("agent-registered-a-boot-1")).lost


def test_a_later_run_registering_ends_nothing_but_is_not_this_runs_registration() -> None:
    this = run_of("boot-1")
    state = fold(this, boot("boot-1"), *placed("1.1"), boot("boot-9"))
    assert state.registration_event_id == "agent-registered-a-boot-1" and state.allocations["1.1"].orphaned


def test_run_boot_ids() -> None:
    assert [run_boot_id("b", n) for n in range(3)] == ["b", "b-1", "b-2"]
    assert registration_id("a", run_boot_id("b", 2)) == "agent-registered-a-b-2"


# -- launch contract ----------------------------------------------------------------------


def test_entrypoint_forms() -> None:
    assert entrypoint_argv({"entrypoint": "python3 train.py"}, startup_hook=False) == [
        "sh",
        "-c",
        "python3 train.py",
    ]
    assert entrypoint_argv({"entrypoint": ["python3", "x.py"]}, startup_hook=False) == ["python3", "x.py"]
    hooked = entrypoint_argv({"entrypoint": ["python3", "x.py"]}, startup_hook=True)
    assert hooked[:2] == ["bash", "-c"] and "source ./startup-hook.sh" in hooked[2]
    assert hooked[3:] == ["bash", "python3", "x.py"]
    assert entrypoint_argv({"entrypoint": "model_def:MyTrial"}, startup_hook=False) == [
        "sh",
        "-c",
        "python3 -m determined.launch.torch_distributed -- --trial model_def:MyTrial",
    ]
    with pytest.raises(EntrypointError):
        entrypoint_argv({}, startup_hook=False)


def test_trial_environment_follows_the_contract() -> None:
    config = {"environment": {"environment_variables": {"cpu": ["A=1", "B=x=y"], "cuda": ["A=2"]}}}
    request = requested(
        "7.2",
        slots=2,
        experiment_id=3,
        trial_seed=9,
        config_json=json.dumps(config),
        hparams_json='{"lr": 1}',
        steps_completed=100,
        latest_checkpoint="ck-1",
        searcher_length=250,
    )
    allocation = given(request, assigned("7.2", ("a", [0, 1]))).allocations["7.2"]
    identity = AgentIdentity("a", "cluster-1", "gw:8080", "/venv/bin")
    inherited = {
        "PATH": "/usr/bin",
        "HOME": "/root",
        "DET_CLUSTER_SECRET": "s3cret",
        "DET_NATS_URL": "nats://x",
    }
    env = trial_environment(
        allocation,
        identity,
        session_token="tok",
        slot_type="cpu",
        inherited=inherited,
        folder=Path("/work/7.2"),
    )
    assert env["PATH"] == "/venv/bin:/usr/bin" and env["HOME"] == "/root"
    assert "DET_CLUSTER_SECRET" not in env and "DET_NATS_URL" not in env
    assert (env["A"], env["B"]) == ("1", "x=y")
    assert (
        env["DET_MASTER"] == "gw:8080" and env["DET_CLUSTER_ID"] == "cluster-1" and env["DET_AGENT_ID"] == "a"
    )
    assert json.loads(env["DET_SLOT_IDS"]) == [0, 1]
    assert (env["DET_TASK_ID"], env["DET_TRIAL_ID"], env["DET_ALLOCATION_ID"]) == ("7", "7", "7.2")
    assert (env["DET_EXPERIMENT_ID"], env["DET_TRIAL_RUN_ID"], env["DET_TRIAL_SEED"]) == ("3", "2", "9")
    assert env["DET_SESSION_TOKEN"] == "tok" and env["DET_TASK_TYPE"] == "TRIAL"
    assert env["DET_EXPERIMENT_CONFIG_FILE"] == "/work/7.2/.det-experiment-config.json"
    assert "DET_EXPERIMENT_CONFIG" not in env and env["DET_HPARAMS"] == '{"lr": 1}'
    assert (env["DET_STEPS_COMPLETED"], env["DET_LATEST_CHECKPOINT"], env["PYTHONUNBUFFERED"]) == (
        "100",
        "ck-1",
        "1",
    )
    assert env["DET_SEARCHER_LENGTH"] == "250"
    # One agent: rank 0 of one container, at this agent's address (the placement names none).
    assert (env["DET_CONTAINER_RANK"], env["DET_CHIEF_IP"]) == ("0", "127.0.0.1")
    assert json.loads(env["DET_CONTAINER_ADDRS"]) == ["127.0.0.1"]
    assert json.loads(env["DET_CONTAINER_SLOT_COUNTS"]) == [2]
    ports = (env["C10D_PORT"], env["INTER_TRAIN_PROCESS_COMM_PORT_1"], env["INTER_TRAIN_PROCESS_COMM_PORT_2"])
    assert tuple(map(int, ports)) == allocation_ports("7.2", "cluster-1")
    plain = trial_environment(
        allocation_of("1.1"),
        identity,
        session_token="t",
        slot_type="cuda",
        inherited={},
        folder=Path("/work/1.1"),
    )
    assert "DET_LATEST_CHECKPOINT" not in plain and plain["PATH"] == "/venv/bin"
    assert (plain["DET_STEPS_COMPLETED"], plain["DET_SEARCHER_LENGTH"], plain["DET_SLOT_IDS"]) == (
        "0",
        "0",
        "[0]",
    )


def test_a_trial_gets_what_checks_the_masters_certificate() -> None:
    identity = AgentIdentity(
        "a",
        "c",
        "https://gw:8080",
        "/venv/bin",
        master_cert_file="/etc/det/cert.pem",
        master_cert_name="master.example",
    )
    env = trial_environment(
        allocation_of("1.1"),
        identity,
        session_token="t",
        slot_type="cpu",
        inherited={},
        folder=Path("/work/1.1"),
    )
    assert (env["DET_MASTER"], env["DET_MASTER_CERT_FILE"], env["DET_MASTER_CERT_NAME"]) == (
        "https://gw:8080",
        "/work/1.1/master-cert.pem",
        "master.example",
    )
    plain = trial_environment(
        allocation_of("1.1"),
        AgentIdentity("a", "c", "gw:8080", "/venv/bin"),
        session_token="t",
        slot_type="cpu",
        inherited={"DET_MASTER_CERT_FILE": "/agent/only.pem"},
        folder=Path("/work/1.1"),
    )
    assert "DET_MASTER_CERT_FILE" not in plain and "DET_MASTER_CERT_NAME" not in plain


def test_every_part_of_a_gang_gets_the_same_layout_and_ports_and_its_own_rank_and_slots() -> None:
    envs = {
        agent_id: trial_environment(
            gang(agent_id).allocations["1.1"],
            AgentIdentity(agent_id, "c", "gw:8080", "/venv/bin", address=f"ignored-{agent_id}"),
            session_token="t",
            slot_type="cpu",
            inherited={},
            folder=Path("/work/1.1"),
        )
        for agent_id in ("a", "b")
    }
    assert (envs["b"]["DET_CONTAINER_RANK"], envs["a"]["DET_CONTAINER_RANK"]) == ("0", "1")
    assert (json.loads(envs["b"]["DET_SLOT_IDS"]), json.loads(envs["a"]["DET_SLOT_IDS"])) == ([0, 2], [1, 3])
    shared = (
        "DET_CONTAINER_ADDRS",
        "DET_CONTAINER_SLOT_COUNTS",
        "DET_CHIEF_IP",
        "C10D_PORT",
        "INTER_TRAIN_PROCESS_COMM_PORT_1",
        "INTER_TRAIN_PROCESS_COMM_PORT_2",
    )
    assert {k: envs["a"][k] for k in shared} == {k: envs["b"][k] for k in shared}
    assert json.loads(envs["a"]["DET_CONTAINER_ADDRS"]) == ["10.0.0.2", "10.0.0.1"]
    assert envs["a"]["DET_CHIEF_IP"] == "10.0.0.2"
    assert json.loads(envs["a"]["DET_CONTAINER_SLOT_COUNTS"]) == [2, 2]
    assert int(envs["a"]["C10D_PORT"]) == allocation_ports("1.1", "c")[0]


def test_slots_are_gpus_when_nvml_sees_some_else_cpus() -> None:
    slots = detect_slots(2)
    types = {slot.type for slot in slots}
    assert types == {"cuda"} or [(s.slot_id, s.type) for s in slots] == [(0, "cpu"), (1, "cpu")]


def test_gpus_can_be_left_out() -> None:
    assert [(s.slot_id, s.type) for s in detect_slots(3, use_gpus=False)] == [
        (0, "cpu"),
        (1, "cpu"),
        (2, "cpu"),
    ]
