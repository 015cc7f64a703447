"""The scheduler's pure core: given events, then the appends it decides.

It sees allocation requests, agents and exits only: what a run means for its
trial is the lifecycle's (tests/unit/test_lifecycle_core.py).
"""

import itertools

from google.protobuf.message import Message
from support import pure_core

from determined.proto import events_pb2 as ev
from services.common.envelope import Append, Envelope, aggregate, payload_field, subject_kind, wrap
from services.scheduler.core import SchedulerCore, SchedulerState

core = SchedulerCore()
_event_ids = itertools.count()


def aggregate_of(payload: Message) -> str:
    kind = subject_kind(payload)
    key = {
        "agent": "agent_id",
        "allocation": "allocation_id",
        "trial": "trial_id",
        "experiment": "experiment_id",
    }
    return aggregate(kind, getattr(payload, key[kind]))


def given(*payloads: Message, state: SchedulerState | None = None) -> SchedulerState:
    state = state or core.initial_state()
    for payload in payloads:
        append = Append(aggregate_of(payload), payload, f"given-{next(_event_ids)}")
        state = core.evolve(state, wrap(append, actor="test", occurred_at_ns=0))
    return state


def settle(state: SchedulerState) -> tuple[SchedulerState, list[Append]]:
    return pure_core.settle(core, state, given)


def kinds(appends: list[Append]) -> list[str]:
    return [payload_field(a.payload) for a in appends]


def msg_ids(appends: list[Append]) -> list[str]:
    return [a.msg_id for a in appends]


def placed(appends: list[Append]) -> dict[str, list[tuple[str, list[int]]]]:
    """Allocation id -> its placements, of the assignments decided."""
    return {
        a.payload.allocation_id: [(p.agent_id, list(p.slot_ids)) for p in a.payload.placements]
        for a in appends
        if isinstance(a.payload, ev.AllocationAssigned)
    }


def agent(agent_id: str = "a", slots: int = 1) -> ev.AgentRegistered:
    return ev.AgentRegistered(
        agent_id=agent_id, hostname=agent_id, slots=[ev.Slot(slot_id=i, type="cpu") for i in range(slots)]
    )


def requested(allocation_id: str, slots: int = 1, experiment_id: int = 1) -> ev.AllocationRequested:
    task_id, _, run = allocation_id.partition(".")
    launch = ev.TrialLaunch(experiment_id=experiment_id, trial_id=int(task_id), trial_run_id=int(run))
    return ev.AllocationRequested(
        allocation_id=allocation_id,
        task_id=task_id,
        task_type="TRIAL",
        slots=slots,
        job_id=f"experiment/{experiment_id}",
        weight=1.0,
        preemptible=True,
        owner="alice",
        trial=launch,
    )


def exited(allocation_id: str, code: int = 0, **extra: object) -> ev.AllocationExited:
    task_id = allocation_id.split(".")[0]
    return ev.AllocationExited(
        allocation_id=allocation_id,
        trial_id=int(task_id),
        task_id=task_id,
        exit_code=code,
        **extra,
    )


def stop(allocation_id: str) -> ev.AllocationStopRequested:
    return ev.AllocationStopRequested(
        allocation_id=allocation_id, task_id=allocation_id.split(".")[0], reason="x"
    )


def kill(allocation_id: str) -> ev.AllocationKillRequested:
    task_id = allocation_id.split(".")[0]
    return ev.AllocationKillRequested(allocation_id=allocation_id, trial_id=int(task_id), task_id=task_id)


def canceled(allocation_id: str) -> ev.AllocationCanceled:
    return ev.AllocationCanceled(allocation_id=allocation_id, task_id=allocation_id.split(".")[0])


# -- assignments --------------------------------------------------------------------


def test_a_request_is_assigned_its_slots() -> None:
    [append] = core.decide(given(agent(), requested("5.1")))
    assigned = append.payload
    assert isinstance(assigned, ev.AllocationAssigned)
    assert (append.aggregate, append.msg_id, append.expected_version) == (
        "allocation/5.1",
        "allocation-assigned-5.1",
        None,
    )
    # The placement carries the agent's address (its hostname, when it registered none).
    assert assigned == ev.AllocationAssigned(
        allocation_id="5.1",
        task_id="5",
        placements=[ev.Placement(agent_id="a", slot_ids=[0], address="a")],
        reason="fair share: job experiment/1 is entitled to 1 of 1 slots in pool 'default';"
        " best fit on a (1 of 1 slots free)",
    )
    # Today's shape: none of the old inline fields.
    assert (assigned.trial_id, assigned.agent_id, list(assigned.slot_ids), assigned.config_json) == (
        0,
        "",
        [],
        "",
    )


def test_an_assigned_request_is_not_assigned_again() -> None:
    state, appends = settle(given(agent(slots=2), requested("1.1")))
    assert msg_ids(appends) == ["allocation-assigned-1.1"]
    assert state.requests["1.1"].assigned and state.requests["1.1"].placements == (("a", (0,)),)
    assert core.decide(given(agent(slots=2), state=state)) == []


def test_nothing_is_assigned_without_an_agent() -> None:
    state = given(requested("1.1"), requested("2.1", slots=0))
    assert core.decide(state) == []
    _, appends = settle(given(agent(), state=state))
    assert placed(appends) == {"1.1": [("a", [0])], "2.1": [("a", [])]}


def test_first_come_first_served_and_slots_are_released_on_exit() -> None:
    state, appends = settle(given(agent(slots=1), requested("1.1"), requested("2.1"), requested("3.1")))
    assert msg_ids(appends) == ["allocation-assigned-1.1"]
    state, appends = settle(given(exited("1.1", 0), state=state))
    assert placed(appends) == {"2.1": [("a", [0])]}
    assert list(state.requests) == ["2.1", "3.1"]
    state, appends = settle(given(exited("2.1", 1), state=state))
    assert placed(appends) == {"3.1": [("a", [0])]}


def test_one_decision_fills_the_free_slots_in_request_order() -> None:
    _, appends = settle(given(agent(slots=3), requested("1.1"), requested("2.1"), requested("3.1", slots=2)))
    assert placed(appends) == {"1.1": [("a", [0])], "2.1": [("a", [1])]}
    assert msg_ids(appends) == ["allocation-assigned-1.1", "allocation-assigned-2.1"]


def test_freed_slots_are_reused() -> None:
    state, _ = settle(given(agent(slots=3), requested("1.1"), requested("2.1"), requested("3.1")))
    state, appends = settle(given(exited("2.1", 0), requested("4.1", slots=1), state=state))
    assert placed(appends) == {"4.1": [("a", [1])]}
    state, appends = settle(given(exited("1.1"), exited("3.1"), requested("5.1", slots=2), state=state))
    assert placed(appends) == {"5.1": [("a", [0, 2])]}


def test_a_request_that_does_not_fit_blocks_the_ones_behind_it() -> None:
    state, _ = settle(given(agent(slots=2), requested("1.1")))
    state, appends = settle(given(requested("2.1", slots=2), requested("3.1", slots=1), state=state))
    assert appends == []  # no backfilling: 3.1 would fit in the free slot
    state, appends = settle(given(requested("4.1", slots=0), state=state))
    assert placed(appends) == {"4.1": [("a", [])]}  # a request for no slot takes nothing from anyone
    state, appends = settle(given(exited("1.1"), state=state))
    assert placed(appends) == {"2.1": [("a", [0, 1])]}
    state, appends = settle(given(exited("2.1"), state=state))
    assert placed(appends) == {"3.1": [("a", [0])]}


def test_a_request_no_agent_could_ever_hold_does_not_block_the_others() -> None:
    state = given(agent(slots=2), requested("1.1", slots=8), requested("2.1"))
    state, appends = settle(state)
    assert placed(appends) == {"2.1": [("a", [0])]}
    assert not state.requests["1.1"].assigned
    # A bigger agent arrives: the request gets its slots.
    _, appends = settle(given(agent("big", slots=8), state=state))
    assert placed(appends) == {"1.1": [("big", list(range(8)))]}


def test_a_request_no_agent_could_hold_is_skipped_before_any_agent_exists() -> None:
    state, appends = settle(given(requested("1.1", slots=2), requested("2.1", slots=1)))
    assert appends == []
    _, appends = settle(given(agent(slots=1), state=state))
    assert placed(appends) == {"2.1": [("a", [0])]}


def test_zero_slot_requests_need_no_free_slot() -> None:
    state, _ = settle(given(agent(slots=1), requested("2.1")))
    _, appends = settle(given(requested("1.1", slots=0), requested("3.1", slots=0), state=state))
    assert placed(appends) == {"1.1": [("a", [])], "3.1": [("a", [])]}


def test_slots_go_to_the_agent_that_has_them() -> None:
    _, appends = settle(given(agent("a", 1), agent("b", 2), requested("1.1", slots=2)))
    assert placed(appends) == {"1.1": [("b", [0, 1])]}


def test_a_gang_spans_agents_when_no_single_one_has_room() -> None:
    state, appends = settle(given(agent("a", 1), agent("b", 1), requested("1.1", slots=2), requested("2.1")))
    assert placed(appends) == {"1.1": [("a", [0]), ("b", [0])]}
    state, appends = settle(
        given(agent("c", 3), requested("3.1", slots=2), requested("4.1", slots=2), state=state)
    )
    assert placed(appends) == {"2.1": [("c", [0])], "3.1": [("c", [1, 2])]}  # 4.1 waits


def test_agents_are_filled_in_the_order_of_their_ids() -> None:
    _, appends = settle(given(agent("b", 1), agent("a", 1), requested("1.1"), requested("2.1")))
    assert placed(appends) == {"1.1": [("a", [0])], "2.1": [("b", [0])]}


# -- withdrawn requests -------------------------------------------------------------


def test_a_pending_request_asked_to_stop_or_die_is_canceled() -> None:
    state = given(requested("1.1"), requested("2.1"), stop("1.1"), kill("2.1"))
    appends = core.decide(state)
    assert kinds(appends) == ["allocation_canceled", "allocation_canceled"]
    first = appends[0]
    assert (first.aggregate, first.msg_id, first.expected_version) == (
        "allocation/1.1",
        "allocation-canceled-1.1",
        None,
    )
    assert (first.payload.allocation_id, first.payload.task_id) == ("1.1", "1")
    assert first.payload.reason == "stopped before it was assigned slots"
    state, _ = settle(state)
    assert state.requests == {}


def test_a_withdrawn_request_is_never_assigned_and_blocks_no_one() -> None:
    state = given(agent(slots=2), requested("1.1", slots=1), requested("2.1", slots=2), requested("3.1"))
    state = given(stop("1.1"), state=state)
    # Decided before the cancel is folded: 1.1 gets no slot.
    assert msg_ids(core.decide(state)) == ["allocation-canceled-1.1", "allocation-assigned-2.1"]
    state = given(kill("2.1"), state=state)
    assert msg_ids(core.decide(state)) == [
        "allocation-canceled-1.1",
        "allocation-canceled-2.1",
        "allocation-assigned-3.1",
    ]


def test_a_stop_or_kill_of_an_assigned_request_decides_nothing() -> None:
    state, _ = settle(given(agent(slots=2), requested("1.1"), requested("2.1")))
    state = given(stop("1.1"), kill("2.1"), stop("1.1"), state=state)
    assert core.decide(state) == []
    # Its slots stay taken until it exits.
    state, appends = settle(given(requested("3.1"), state=state))
    assert appends == []
    _, appends = settle(given(exited("1.1", -9, killed=True), state=state))
    assert placed(appends) == {"3.1": [("a", [0])]}


def test_a_canceled_request_leaves_the_queue() -> None:
    state, _ = settle(given(requested("1.1", slots=1), stop("1.1")))
    assert state.requests == {}
    state = given(canceled("1.1"), stop("1.1"), kill("1.1"), state=state)  # late, repeated
    assert state.requests == {} and core.decide(state) == []


# -- exits and agents -----------------------------------------------------------------


def test_an_exit_frees_the_slots_and_the_request_leaves_the_state() -> None:
    state, _ = settle(given(agent(slots=1), requested("1.1")))
    state = given(exited("1.1", 3), state=state)
    assert state.requests == {}
    _, appends = settle(given(requested("1.2"), state=state))
    assert placed(appends) == {"1.2": [("a", [0])]}


def test_exits_and_assignments_of_unknown_allocations_are_ignored() -> None:
    state, _ = settle(given(agent(slots=1), requested("1.1")))
    before = state
    unknown = ev.AllocationAssigned(
        allocation_id="9.1", task_id="9", placements=[ev.Placement(agent_id="a", slot_ids=[0])]
    )
    state = given(exited("9.1"), unknown, stop("9.1"), kill("9.1"), canceled("9.1"), state=state)
    assert state == before and core.decide(state) == []


def test_duplicate_events_are_harmless() -> None:
    state, [append] = settle(
        given(agent(slots=2), agent(slots=2), requested("1.1"), requested("2.1", slots=2))
    )
    state = given(append.payload, state=state)  # the assignment read twice
    assert core.decide(state) == []
    state = given(exited("1.1"), exited("1.1"), state=state)
    state, appends = settle(state)
    assert placed(appends) == {"2.1": [("a", [0, 1])]}


def test_a_re_registered_agent_keeps_its_allocations_slots_until_they_exit() -> None:
    state, _ = settle(given(agent(slots=2), requested("1.1"), requested("2.1")))
    state, appends = settle(given(agent(slots=2), requested("3.1"), state=state))
    assert appends == []  # the agent closes 1.1 and 2.1 (agent_lost); until then they hold their slots
    lost = {"error": "agent restarted", "agent_lost": True}
    state, appends = settle(given(exited("1.1", -1, **lost), state=state))
    assert placed(appends) == {"3.1": [("a", [0])]}
    _, appends = settle(given(exited("2.1", -1, **lost), requested("1.2"), state=state))
    assert placed(appends) == {"1.2": [("a", [1])]}


def test_an_agent_registering_again_with_other_slots_offers_those() -> None:
    state, _ = settle(given(agent(slots=1), requested("1.1")))
    state, appends = settle(given(agent(slots=3), requested("2.1", slots=2), state=state))
    assert placed(appends) == {"2.1": [("a", [1, 2])]}
    assert state.agents["a"].slot_ids == (0, 1, 2)


def test_the_queue_keeps_the_request_order_when_a_request_changes() -> None:
    state = given(requested("1.1", slots=4), requested("2.1"), requested("3.1"))
    state = given(kill("2.1"), state=state)
    assert list(state.requests) == ["1.1", "2.1", "3.1"]
    _, appends = settle(given(agent(slots=4), state=state))
    assert msg_ids(appends) == ["allocation-canceled-2.1", "allocation-assigned-1.1"]


def test_trial_and_experiment_events_are_not_the_schedulers() -> None:
    state, _ = settle(given(agent(slots=1), requested("1.1")))
    others = given(
        ev.TrialCreated(trial_id=2, experiment_id=1),
        ev.ExperimentKillRequested(experiment_id=1),
        ev.TrialEnded(trial_id=1, experiment_id=1),
        ev.AllocationStarted(allocation_id="1.1", trial_id=1, agent_id="a", pid=4),
        ev.AllocationStopAcknowledged(allocation_id="1.1", task_id="1"),
        state=state,
    )
    assert others == state
    assert core.evolve(state, Envelope(event_id="future", aggregate="allocation/1.1")) == state


# -- old logs -------------------------------------------------------------------------


def old_assigned(allocation_id: str, slot_ids: list[int], agent_id: str = "a") -> ev.AllocationAssigned:
    trial_id, _, run = allocation_id.partition(".")
    return ev.AllocationAssigned(
        allocation_id=allocation_id,
        trial_id=int(trial_id),
        experiment_id=1,
        agent_id=agent_id,
        slot_ids=slot_ids,
        trial_run_id=int(run),
        config_json="{}",
        owner="alice",
    )


def test_an_old_shape_assignment_holds_its_slots_until_its_exit() -> None:
    state = given(agent(slots=2), old_assigned("1.1", [1]))
    request = state.requests["1.1"]
    assert request.assigned and request.placements == (("a", (1,)),)
    assert (request.requested.task_id, request.requested.slots) == ("1", 1)
    assert core.decide(state) == []
    state, appends = settle(given(requested("2.1", slots=2), requested("3.1"), state=state))
    assert appends == []
    state, appends = settle(given(exited("1.1", 3), state=state))
    assert placed(appends) == {"2.1": [("a", [0, 1])]}


def test_replaying_a_whole_history_decides_nothing_again() -> None:
    history: list[Message] = [agent(slots=2), requested("1.1"), requested("2.1", slots=2), requested("3.1")]
    state, appends = settle(given(*history))
    history += [a.payload for a in appends]
    for events in (
        [exited("1.1", 1), requested("1.2")],
        [stop("3.1")],
        [agent(slots=2)],
        [exited("2.1", -1, agent_lost=True)],
        [kill("1.2")],
        [exited("1.2", -15, killed=True)],
    ):
        state, appends = settle(given(*events, state=state))
        history += [*events, *[a.payload for a in appends]]
    assert state.requests == {}
    assert core.decide(given(*history)) == []
    assert [
        (payload_field(e), getattr(e, "allocation_id", ""))
        for e in history
        if payload_field(e) != "allocation_requested"
    ] == [
        ("agent_registered", ""),
        ("allocation_assigned", "1.1"),
        ("allocation_exited", "1.1"),
        ("allocation_assigned", "2.1"),
        ("allocation_stop_requested", "3.1"),
        ("allocation_canceled", "3.1"),
        ("agent_registered", ""),
        ("allocation_exited", "2.1"),
        ("allocation_assigned", "1.2"),
        ("allocation_kill_requested", "1.2"),
        ("allocation_exited", "1.2"),
    ]
