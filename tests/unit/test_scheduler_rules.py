"""The scheduler's rules of issue 8: pools, fitting, fair share, priority,
preemption after min_run_s, agents lost, disabled and draining, gangs that
span agents, job overrides, clock ticks and the job queue's reasons.

Time is the log's: each `given` folds its events at `at` seconds.
"""

import itertools

from google.protobuf.message import Message
from support import pure_core

from determined.proto import events_pb2 as ev
from services.common.envelope import Append, aggregate, payload_field, subject_kind, wrap
from services.scheduler.config import SchedulerConfig
from services.scheduler.core import SchedulerCore, SchedulerState, tick
from services.scheduler.queue import job_queue

S = 10**9
FAIR = SchedulerConfig(min_run_s=30)
PRIO = SchedulerConfig(default_type="priority", min_run_s=30)
_ids = itertools.count()


class Run:
    """A scheduler core and its state, driven as the Shell drives it."""

    def __init__(self, config: SchedulerConfig = FAIR) -> None:
        self.config = config
        self.core = SchedulerCore(config)
        self.state: SchedulerState = self.core.initial_state()
        self.at = 0.0

    def given(self, *payloads: Message, at: float | None = None) -> "Run":
        self.at = self.at if at is None else at
        self.state = self._fold(*payloads, state=self.state)
        return self

    def _fold(self, *payloads: Message, state: SchedulerState) -> SchedulerState:
        for payload in payloads:
            kind = subject_kind(payload)
            key = {"experiment": "job_id", "allocation": "allocation_id", "agent": "agent_id"}[kind]
            name = getattr(payload, key) if kind != "experiment" else payload.job_id.partition("/")[2]
            append = Append(aggregate(kind, name), payload, f"given-{next(_ids)}")
            envelope = wrap(append, actor="test", occurred_at_ns=int(self.at * S))
            state = self.core.evolve(state, envelope)
        return state

    def settle(self) -> list[Append]:
        self.state, appends = pure_core.settle(self.core, self.state, self._fold)
        return appends

    def decide(self) -> list[Append]:
        return self.core.decide(self.state)

    def queue(self) -> dict[str, tuple[int, int, str, int, str]]:
        """Job id -> (needed, acquired, state, position, waiting reason)."""
        return {
            j.job_id: (j.slots_needed, j.slots_acquired, j.state, j.position, j.waiting_reason)
            for j in job_queue(self.state, self.config)
        }


def agent(agent_id: str, slots: int, pool: str = "", address: str = "") -> ev.AgentRegistered:
    return ev.AgentRegistered(
        agent_id=agent_id,
        hostname=f"host-{agent_id}",
        slots=[ev.Slot(slot_id=i, type="cpu") for i in range(slots)],
        resource_pool=pool,
        address=address,
    )


def requested(
    allocation_id: str,
    slots: int = 1,
    experiment: int = 1,
    pool: str = "",
    priority: int = 0,
    weight: float = 1.0,
    max_slots: int = 0,
    preemptible: bool = True,
) -> ev.AllocationRequested:
    task_id, _, run = allocation_id.partition(".")
    return ev.AllocationRequested(
        allocation_id=allocation_id,
        task_id=task_id,
        task_type="TRIAL",
        slots=slots,
        resource_pool=pool,
        job_id=f"experiment/{experiment}",
        weight=weight,
        priority=priority,
        max_slots=max_slots,
        preemptible=preemptible,
        trial=ev.TrialLaunch(experiment_id=experiment, trial_id=int(task_id), trial_run_id=int(run or 1)),
    )


def exited(allocation_id: str, code: int = 0, **extra: object) -> ev.AllocationExited:
    return ev.AllocationExited(
        allocation_id=allocation_id, task_id=allocation_id.split(".")[0], exit_code=code, **extra
    )


def part_exited(
    allocation_id: str, agent_id: str, code: int = 0, **extra: object
) -> ev.AllocationResourcesExited:
    task_id = allocation_id.split(".")[0]
    return ev.AllocationResourcesExited(
        allocation_id=allocation_id,
        task_id=task_id,
        agent_id=agent_id,
        exit_code=code,
        trial_id=int(task_id),
        **extra,
    )


def stop(allocation_id: str) -> ev.AllocationStopRequested:
    return ev.AllocationStopRequested(
        allocation_id=allocation_id, task_id=allocation_id.split(".")[0], reason="x"
    )


def kill(allocation_id: str) -> ev.AllocationKillRequested:
    return ev.AllocationKillRequested(allocation_id=allocation_id, task_id=allocation_id.split(".")[0])


def placed(appends: list[Append]) -> dict[str, list[tuple[str, list[int]]]]:
    return {
        a.payload.allocation_id: [(p.agent_id, list(p.slot_ids)) for p in a.payload.placements]
        for a in appends
        if isinstance(a.payload, ev.AllocationAssigned)
    }


def preempted(appends: list[Append]) -> list[str]:
    return [a.payload.allocation_id for a in appends if a.msg_id.startswith("allocation-preempt-")]


def msg_ids(appends: list[Append]) -> list[str]:
    return [a.msg_id for a in appends]


def running(run: Run) -> dict[str, int]:
    """Job id -> slots held by allocations not asked to stop."""
    held: dict[str, int] = {}
    for r in run.state.requests.values():
        if r.placements and not r.withdrawn:
            held[r.job_id] = held.get(r.job_id, 0) + r.slots
    return held


def exit_stopped(run: Run) -> None:
    """Every allocation asked to stop exits."""
    run.given(*[exited(a) for a, r in run.state.requests.items() if r.placements and r.withdrawn])


# -- pools and fitting ------------------------------------------------------------------


def test_pools_are_scheduled_alone() -> None:
    run = Run().given(agent("a", 1), agent("g", 2, pool="gpu"))
    run.given(
        requested("1.1", slots=2), requested("2.1", pool="gpu", experiment=2), requested("3.1", pool="cpu")
    )
    assert placed(run.settle()) == {"2.1": [("g", [0])]}  # 1.1 can never fit in "default" (1 slot)
    assert run.queue()["experiment/1"][4] == "needs 2 slots; pool 'default' has 1"
    assert run.queue()["experiment/1"][3] == 1
    run.given(requested("4.1", pool="cpu", experiment=4))
    assert run.queue()["experiment/4"][4] == "no agent in pool 'cpu'"
    run.given(agent("c", 1, pool="cpu"))
    assert placed(run.settle()) == {"3.1": [("c", [0])]}


def test_an_agent_without_a_pool_is_in_default_and_its_address_is_its_hostname() -> None:
    run = Run().given(agent("a", 1), agent("b", 1, address="10.0.0.2"), requested("1.1", slots=2))
    [append] = run.settle()
    assert [(p.agent_id, p.address) for p in append.payload.placements] == [
        ("a", "host-a"),
        ("b", "10.0.0.2"),
    ]
    assert run.state.agents["a"].resource_pool == "default" and run.state.agents["a"].address == "host-a"


def test_best_fit_puts_a_gang_on_the_fullest_agent_with_room() -> None:
    run = Run().given(agent("a", 4), agent("b", 2), agent("c", 4))
    run.given(requested("1.1", slots=2, experiment=1))
    assert placed(run.settle()) == {"1.1": [("b", [0, 1])]}
    run.given(requested("2.1", slots=1, experiment=2), requested("3.1", slots=3, experiment=3))
    # 2.1: a and c tie (4 free): a; 3.1: a has 3 free, the fullest with room.
    assert placed(run.settle()) == {"2.1": [("a", [0])], "3.1": [("a", [1, 2, 3])]}


def test_a_gang_spans_the_fewest_agents_idle_first_and_the_last_is_a_best_fit() -> None:
    run = Run().given(agent("a", 8), agent("b", 8), agent("c", 2), agent("d", 8))
    run.given(requested("1.1", slots=1, experiment=1))
    run.settle()  # on c
    run.given(requested("2.1", slots=8, experiment=2))
    assert placed(run.settle()) == {"2.1": [("a", list(range(8)))]}
    run.given(requested("3.1", slots=9, experiment=3))
    # b (8, idle) then the best fit for 1: c (1 free).
    assert placed(run.settle()) == {"3.1": [("b", list(range(8))), ("c", [1])]}


def test_disabled_draining_and_lost_agents_get_nothing_new() -> None:
    run = Run().given(agent("a", 1), agent("b", 1), agent("c", 1), agent("d", 1))
    run.given(
        ev.AgentDisabled(agent_id="a"),
        ev.AgentDisabled(agent_id="b", drain=True),
        ev.AgentLost(agent_id="c", registration_event_id=registered(run, "c")),
    )
    run.given(requested("1.1", slots=1), requested("2.1", slots=1, experiment=2))
    assert placed(run.settle()) == {"1.1": [("d", [0])]}
    assert run.queue()["experiment/2"][4] == "its fair share is 0 slots and it holds 0" or run.queue()[
        "experiment/2"
    ][4].startswith("needs 1 slots")


# -- fair share -------------------------------------------------------------------------


def fill(run: Run, experiment: int, first: int, count: int, slots: int = 1, **extra: object) -> None:
    run.given(
        *[requested(f"{first + i}.1", slots=slots, experiment=experiment, **extra) for i in range(count)]
    )  # type: ignore[arg-type]


def test_a_newcomer_gets_its_share_once_the_others_ran_min_run_s() -> None:
    run = Run().given(agent("a", 2), agent("b", 2), at=0)
    fill(run, 1, 10, 8)
    assert len(placed(run.settle())) == 4
    fill(run, 2, 20, 8)
    run.given(at=29)
    assert run.settle() == []  # min_run_s not reached: nobody is preempted yet
    assert run.queue()["experiment/2"][4] == "needs 1 slots; the largest free block is 0"
    run.state = tick(run.state, 30 * S)
    appends = run.settle()
    # The two newest of experiment 1, once each; never more than experiment 2 needs.
    assert preempted(appends) == ["13.1", "12.1"]
    assert appends[0].payload.reason.startswith(
        "preempted by the scheduler: job experiment/1 is over its fair share of 2"
    )
    assert run.settle() == []  # no double preemption while they stop
    exit_stopped(run)
    assert placed(run.settle()) == {"20.1": [("b", [0])], "21.1": [("b", [1])]}
    assert running(run) == {"experiment/1": 2, "experiment/2": 2}
    run.given(at=1000)
    assert run.settle() == []  # balanced: no thrash


def test_weights_divide_the_slots_worked_example() -> None:
    # §5: 8 slots, weights 10 vs 30, demands 3 vs 7 -> 2 and 6.
    run = Run().given(agent("a", 8))
    fill(run, 1, 10, 3, weight=10)
    fill(run, 2, 20, 7, weight=30)
    run.settle()
    assert running(run) == {"experiment/1": 2, "experiment/2": 6}


def test_a_job_below_its_share_keeps_what_it_asks_and_the_rest_goes_to_the_others() -> None:
    run = Run().given(agent("a", 8))
    fill(run, 1, 10, 1)
    fill(run, 2, 20, 10)
    run.settle()
    assert running(run) == {"experiment/1": 1, "experiment/2": 7}


def test_max_slots_caps_a_job_even_with_free_slots_worked_example() -> None:
    # §5: max_slots 2 with 4 running 1-slot tasks -> two of them are released.
    run = Run().given(agent("a", 4), at=0)
    fill(run, 1, 10, 4)
    run.settle()
    run.given(ev.JobResourcesChanged(job_id="experiment/1", max_slots=2), at=40)
    assert preempted(run.settle()) == []  # nobody needs the slots: no preemption for its own sake
    fill(run, 1, 14, 1)
    assert run.queue()["experiment/1"][4] == "max_slots 2 reached"
    fill(run, 2, 20, 4)
    assert preempted(run.settle()) == ["13.1", "12.1"]


def test_max_slots_from_the_request_holds_back_new_starts() -> None:
    run = Run().given(agent("a", 4))
    fill(run, 1, 10, 4, max_slots=2)
    assert len(placed(run.settle())) == 2
    assert run.queue()["experiment/1"] == (4, 2, "SCHEDULED", 1, "max_slots 2 reached")


def test_two_gangs_that_cannot_both_fit_do_not_deadlock_worked_example() -> None:
    # §5: 2 groups each wanting a 2-slot gang on 2 slots -> one runs.
    run = Run().given(agent("a", 1), agent("b", 1))
    run.given(requested("1.1", slots=2, experiment=1), requested("2.1", slots=2, experiment=2))
    assert placed(run.settle()) == {"1.1": [("a", [0]), ("b", [0])]}
    assert run.queue()["experiment/2"][4] == "its fair share is 0 slots and it holds 0"


def test_a_non_preemptible_allocation_is_never_asked_to_stop() -> None:
    run = Run().given(agent("a", 2), at=0)
    fill(run, 1, 10, 2, preemptible=False)
    run.settle()
    fill(run, 2, 20, 2)
    run.given(at=100)
    assert run.settle() == []
    assert running(run) == {"experiment/1": 2}


def test_an_allocation_asked_to_stop_keeps_its_slots_until_it_exits() -> None:
    run = Run().given(agent("a", 2), at=0)
    fill(run, 1, 10, 2)
    run.settle()
    run.given(stop("10.1"))
    fill(run, 2, 20, 1)
    run.given(at=100)
    assert run.settle() == []  # 20.1 waits for 10.1's slot; nothing more is preempted
    run.given(exited("10.1"))
    assert placed(run.settle()) == {"20.1": [("a", [0])]}


def test_weight_override_rebalances() -> None:
    run = Run().given(agent("a", 4), at=0)
    fill(run, 1, 10, 4)
    fill(run, 2, 20, 4)
    run.settle()
    assert running(run) == {"experiment/1": 2, "experiment/2": 2}
    run.given(ev.JobResourcesChanged(job_id="experiment/2", weight=3), at=60)
    assert preempted(run.settle()) == ["11.1"]


# -- priority ---------------------------------------------------------------------------


def test_priority_lower_number_first_and_preempts_strictly_lower_after_min_run() -> None:
    run = Run(PRIO).given(agent("a", 2), at=0)
    fill(run, 1, 10, 2)  # default priority 42
    run.settle()
    fill(run, 2, 20, 1, priority=42)
    run.given(at=100)
    assert run.settle() == []  # equal priority never preempts
    run2 = Run(PRIO).given(agent("a", 2), at=0)
    fill(run2, 1, 10, 2)
    run2.settle()
    fill(run2, 3, 30, 1, priority=10)
    run2.given(at=29)
    assert run2.settle() == []
    run2.state = tick(run2.state, 30 * S)
    appends = run2.settle()
    assert preempted(appends) == ["11.1"]
    assert appends[0].payload.reason == "preempted by the scheduler: a priority 10 request needs its slots"
    assert run2.settle() == []
    exit_stopped(run2)
    assert placed(run2.settle()) == {"30.1": [("a", [1])]}


def test_priority_order_and_the_queue() -> None:
    run = Run(PRIO).given(agent("a", 1))
    fill(run, 1, 10, 1, priority=50)
    fill(run, 2, 20, 1, priority=5, preemptible=False)
    fill(run, 3, 30, 1, priority=5)
    assert placed(run.settle()) == {"20.1": [("a", [0])]}
    queue = run.queue()
    assert [queue[j][3] for j in ("experiment/2", "experiment/3", "experiment/1")] == [1, 2, 3]
    assert queue["experiment/3"][4] == "needs 1 slots; the largest free block is 0"
    assert queue["experiment/1"][4] == "waits behind priority 5 jobs"


def test_priority_never_preempts_in_vain() -> None:
    run = Run(PRIO).given(agent("a", 4), at=0)
    fill(run, 1, 10, 1, priority=50)
    fill(run, 2, 20, 3, priority=5, preemptible=False)
    run.settle()
    fill(run, 3, 30, 1, priority=1, slots=3)
    run.given(at=100)
    assert run.settle() == []  # the one lower-priority slot would not be enough


def test_priority_override_and_max_slots() -> None:
    run = Run(PRIO).given(agent("a", 2), at=0)
    fill(run, 1, 10, 2)
    run.settle()
    fill(run, 2, 20, 2, max_slots=1)
    run.given(ev.JobResourcesChanged(job_id="experiment/2", priority=1), at=60)
    assert preempted(run.settle()) == ["11.1"]  # one slot: its max_slots
    exit_stopped(run)
    assert placed(run.settle()) == {"20.1": [("a", [1])]}
    assert run.queue()["experiment/2"][4] == "max_slots 1 reached"


# -- agents ------------------------------------------------------------------------------


def registered(run: Run, agent_id: str) -> str:
    return run.state.agents[agent_id].registration_event_id


def test_a_lost_agent_closes_its_allocations_single_and_multi_agent() -> None:
    run = Run().given(agent("a", 2), agent("b", 2), agent("c", 2))
    run.given(requested("1.1", slots=2, experiment=1), requested("2.1", slots=1, experiment=2))
    run.given(requested("3.1", slots=3, experiment=3))
    run.settle()
    where = {a: [p[0] for p in r.placements] for a, r in run.state.requests.items()}
    assert where == {"1.1": ["a"], "2.1": ["b"], "3.1": ["c", "b"]}
    run.given(ev.AgentLost(agent_id="b", registration_event_id="old", reason="no heartbeat"))
    assert run.decide() == []  # an older registration's loss changes nothing
    run.given(ev.AgentLost(agent_id="b", registration_event_id=registered(run, "b"), reason="no heartbeat"))
    appends = run.decide()
    assert msg_ids(appends) == ["allocation-exited-2.1", "allocation-exited-3.1"]
    exit_ = appends[1].payload
    assert (exit_.agent_lost, exit_.exit_code, exit_.error, exit_.agent_id, exit_.trial_id) == (
        True,
        -1,
        "agent b lost: no heartbeat",
        "b",
        3,
    )
    assert run.settle() == appends
    assert list(run.state.requests) == ["1.1"]
    run.given(requested("4.1", slots=3, experiment=4))
    assert run.settle() == []  # b's slots are not offered
    run.given(agent("b", 2))  # registered again: counts again
    assert not run.state.agents["b"].lost
    assert placed(run.settle()) == {"4.1": [("b", [0, 1]), ("c", [0])]}


def test_disable_without_drain_stops_its_allocations_with_drain_they_finish() -> None:
    run = Run().given(agent("a", 1), agent("b", 1))
    run.given(requested("1.1", experiment=1), requested("2.1", experiment=2))
    run.settle()
    on = {r.placements[0][0]: a for a, r in run.state.requests.items()}
    run.given(ev.AgentDisabled(agent_id="b", drain=True))
    assert run.decide() == []
    run.given(ev.AgentDisabled(agent_id="a"))
    [append] = run.settle()
    assert (append.msg_id, append.payload.reason) == (
        f"allocation-stop-disabled-{on['a']}",
        "agent a disabled",
    )
    run.given(exited(on["a"]), exited(on["b"]), requested("3.1", experiment=3))
    assert run.settle() == []
    assert run.queue()["experiment/3"][4] == "no agent in pool 'default'"
    run.given(ev.AgentEnabled(agent_id="b"))
    assert placed(run.settle()) == {"3.1": [("b", [0])]}
    run.given(agent("a", 1))  # a restart keeps the operator's disable
    assert not run.state.agents["a"].enabled


# -- gangs ---------------------------------------------------------------------------------


def gang(run: Run) -> None:
    run.given(agent("a", 2), agent("b", 2), requested("1.1", slots=4))
    assert placed(run.settle()) == {"1.1": [("a", [0, 1]), ("b", [0, 1])]}


def test_the_first_failed_part_kills_the_gang_and_the_last_exit_closes_it() -> None:
    run = Run()
    gang(run)
    run.given(part_exited("1.1", "b", 1))
    [append] = run.settle()
    assert append.msg_id == "allocation-kill-gang-1.1"
    assert append.payload.reason == "worker on agent b exited with code 1"
    run.given(part_exited("1.1", "a", -9, killed=True))
    [append] = run.settle()
    assert append.msg_id == "allocation-exited-1.1"
    assert (append.payload.exit_code, append.payload.agent_id, append.payload.killed) == (1, "b", False)
    assert run.state.requests == {}


def test_a_gang_whose_parts_all_succeed_exits_zero_from_the_chief() -> None:
    run = Run()
    gang(run)
    run.given(part_exited("1.1", "b", 0))
    assert run.decide() == []
    run.given(part_exited("1.1", "b", 3))  # a repeated part exit is ignored
    run.given(part_exited("1.1", "a", 0))
    [append] = run.settle()
    assert (append.payload.exit_code, append.payload.agent_id, append.payload.error) == (0, "a", "")


def test_a_gang_killed_on_request_exits_killed_and_an_unasked_kill_fails_it() -> None:
    run = Run()
    gang(run)
    run.given(kill("1.1"), part_exited("1.1", "a", -9, killed=True))
    assert run.decide() == []
    run.given(part_exited("1.1", "b", -9, killed=True))
    [append] = run.settle()
    assert append.payload.killed and (append.payload.exit_code, append.payload.agent_id) == (0, "a")
    run = Run()
    gang(run)
    run.given(part_exited("1.1", "a", -9, killed=True))
    [append] = run.settle()
    assert append.payload.reason == "worker on agent a was killed"


# -- time ----------------------------------------------------------------------------------


def test_now_is_the_newest_of_envelopes_and_ticks() -> None:
    run = Run().given(agent("a", 1), at=5)
    assert run.state.now_ns == 5 * S
    run.given(agent("b", 1), at=3)
    assert run.state.now_ns == 5 * S
    assert tick(run.state, 4 * S) is run.state
    assert tick(run.state, 9 * S).now_ns == 9 * S
    assert SchedulerCore().tick(run.state, 9 * S).now_ns == 9 * S


def test_the_queue_view() -> None:
    run = Run().given(agent("agent-1", 2), agent("agent-2", 1), at=7)
    run.given(requested("1.1", slots=1, experiment=1))
    run.settle()
    run.given(requested("2.1", slots=4, experiment=2))
    [one, two] = job_queue(run.state, FAIR)
    assert (one.job_id, one.state, one.slots_acquired, one.position, one.priority, one.weight) == (
        "experiment/1",
        "SCHEDULED",
        1,
        1,
        42,
        1.0,
    )
    assert (two.state, two.slots_needed, two.submitted_at_ns, two.waiting_reason) == (
        "QUEUED",
        4,
        7 * S,
        "needs 4 slots; pool 'default' has 3",
    )

    run = Run().given(agent("agent-1", 2), agent("agent-2", 2), at=0)
    fill(run, 1, 10, 3)
    run.settle()
    run.given(requested("20.1", slots=2, experiment=2))
    reasons = {j.job_id: j.waiting_reason for j in job_queue(run.state, FAIR)}
    assert reasons == {
        "experiment/1": "",
        "experiment/2": "needs 2 slots; the largest free block is 1 on agent-2",
    }
    assert payload_field(ev.JobResourcesChanged()) == "job_resources_changed"


# -- why an assignment was made (AllocationAssigned.reason) -----------------------------


def reasons(appends: list[Append]) -> dict[str, str]:
    return {
        a.payload.allocation_id: a.payload.reason
        for a in appends
        if a.msg_id.startswith("allocation-assigned-")
    }


def test_an_assignment_says_what_the_pools_scheduler_saw_and_why_there() -> None:
    run = Run().given(agent("agent-1", 4), agent("agent-2", 2))
    fill(run, 1, 10, 1, slots=2)
    fill(run, 2, 20, 1, slots=4)
    assert reasons(run.settle()) == {
        "10.1": "fair share: job experiment/1 is entitled to 2 of 6 slots in pool 'default';"
        " best fit on agent-2 (2 of 2 slots free)",
        "20.1": "fair share: job experiment/2 is entitled to 4 of 6 slots in pool 'default';"
        " best fit on agent-1 (4 of 4 slots free)",
    }
    run = Run(PRIO).given(agent("agent-1", 1), agent("agent-2", 1))
    run.given(requested("1.1", slots=2, priority=7), requested("2.1", slots=0, experiment=2))
    assert reasons(run.settle()) == {
        "1.1": "priority 7: the first waiting request of pool 'default' that fits;"
        " spans 2 agents (agent-1, agent-2): none has 2 slots free",
        "2.1": "needs no slot; on agent-1",
    }
