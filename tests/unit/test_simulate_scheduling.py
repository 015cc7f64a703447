"""What-if scheduling (services/scheduler/simulate.py): a recorded workload
replayed through the scheduler's pure core. Under the settings that ran it
makes the recorded assignments, in order, on the same agents and slots (a log
bench/gen_log.py's cores write, and logs recorded from real clusters); under
others, preempted allocations come back with the rest of their run, a task's
next allocation follows the one before, and stops keep their place in a run."""

from typing import Any

import pytest
from google.protobuf.message import Message
from support.generated_log import generated_log
from support.golden_log import golden_log

from determined.proto import api_pb2
from determined.proto import events_pb2 as ev
from services.common.envelope import Append, wrap
from services.common.eventlog import StoredEvent
from services.common.job_queue import PublishedQueue
from services.gateway.features.events.workload import WORKLOAD_KINDS, WorkloadRecorder
from services.scheduler.core import SchedulerCore
from services.scheduler.simulate import Outcome, Settings, as_recorded, simulate
from services.scheduler.simulate_report import recorded_assignments, report, simulated_assignments
from services.scheduler.simulate_workload import agents_of

S = 10**9
T0 = 1_790_000_000 * S


def recorded(log: list[StoredEvent]) -> api_pb2.GetWorkloadResponse:
    recorder = WorkloadRecorder()
    for stored in log:
        if stored.envelope.aggregate.partition("/")[0] in WORKLOAD_KINDS:
            recorder.fold(stored)
    return recorder.response(PublishedQueue())


@pytest.fixture(scope="module")
def generated() -> api_pb2.GetWorkloadResponse:
    """3,000 events of three searches at once on 4 agents of 4 slots, with
    pauses, kills and failures (`--seed 4 --incidents 20`): two preemptions."""
    return recorded(generated_log(3000, seed=4, incidents=20))


def test_a_generated_log_is_reproduced_under_the_settings_that_ran(
    generated: api_pb2.GetWorkloadResponse,
) -> None:
    allocations = generated.allocations
    assert sum(a.preempted for a in allocations) == 2
    assert any(a.stop_requested_at_ns and not a.assigned_at_ns for a in allocations)  # canceled waiting
    assert any(a.stop_requested_at_ns and not a.preempted and a.assigned_at_ns for a in allocations)
    assert as_recorded(generated, Settings(scheduler="fair_share"))
    outcome = simulate(generated)
    assert simulated_assignments(outcome.assigned) == recorded_assignments(allocations)
    said = report(generated, outcome)
    assert (said.reproduced, said.difference) == (said.assignments, "")
    for line in [*said.jobs, said.total]:
        assert line.simulated == line.recorded


@pytest.mark.parametrize(
    "name", ["adaptive_pause_kill.jsonl", "pause_withdrawn.jsonl", "three_experiments.jsonl"]
)
def test_logs_of_real_clusters_are_reproduced(name: str) -> None:
    """The scheduler appends a moment after the event it answers (an old
    log's assignment is its own request): same assignments, same figures."""
    log = [StoredEvent(n, envelope, False) for n, envelope in enumerate(golden_log(name), start=1)]
    workload = recorded(log)
    outcome = simulate(workload)
    assert simulated_assignments(outcome.assigned) == recorded_assignments(workload.allocations)
    assert report(workload, outcome).total.simulated == report(workload, outcome).total.recorded


def cluster_log(steps: list[tuple[float, str, Message | None]]) -> list[StoredEvent]:
    """The log of a cluster whose scheduler (the real core) folds each step's
    event, or looks at the clock (None), then appends what it decides a
    millisecond apart, as a running one does after the event it answers."""
    core = SchedulerCore()
    state = core.initial_state()
    log: list[StoredEvent] = []

    def stored(append: Append, actor: str, at: int) -> None:
        nonlocal state
        envelope = wrap(append, actor=actor, occurred_at_ns=at)
        log.append(StoredEvent(len(log) + 1, envelope, caught_up=False))
        state = core.evolve(state, envelope)

    for at_s, aggregate, payload in steps:
        at = T0 + int(at_s * S)
        if payload is None:
            state = core.tick(state, at)
        else:
            stored(Append(aggregate, payload, f"step-{len(log)}"), "service:x", at)
        while decided := core.decide(state):
            for append in decided:
                at += 10**6
                stored(append, "service:scheduler", at)
    return log


def requested(allocation_id: str, job: int, slots: int = 1) -> tuple[str, ev.AllocationRequested]:
    task_id = allocation_id.partition(".")[0]
    asked = ev.AllocationRequested(
        allocation_id=allocation_id,
        task_id=task_id,
        task_type="TRIAL",
        slots=slots,
        job_id=f"experiment/{job}",
        weight=1.0,
        preemptible=True,
        trial=ev.TrialLaunch(),
    )
    return f"allocation/{allocation_id}", asked


def exited(allocation_id: str) -> tuple[str, ev.AllocationExited]:
    return f"allocation/{allocation_id}", ev.AllocationExited(allocation_id=allocation_id)


def test_a_running_clusters_log_is_reproduced_with_its_waits() -> None:
    """Decisions a moment after their causes, a preemption a tick let through,
    a lost agent and the allocations it took down, a searcher's stop."""
    slots = [ev.Slot(slot_id=0), ev.Slot(slot_id=1)]
    log = cluster_log(
        [
            (0, "agent/a1", ev.AgentRegistered(agent_id="a1", slots=slots)),
            (0.1, "agent/a2", ev.AgentRegistered(agent_id="a2", slots=slots)),
            (1, *requested("1.1", job=1, slots=2)),
            (2, *requested("2.1", job=2)),
            (3, *requested("3.1", job=2)),
            (4, *requested("4.1", job=3)),
            (35, "", None),  # the clock: 2.1 and 3.1 ran min_run_s
            (37, *exited("3.1")),
            (38, *exited("2.1")),
            (39, *requested("3.2", job=2)),
            (50, "agent/a1", ev.AgentLost(agent_id="a1", registration_event_id="step-0")),
            (51, *requested("1.2", job=1, slots=2)),
            (60, "allocation/4.1", ev.AllocationStopRequested(allocation_id="4.1", reason="cut")),
            (62, *exited("4.1")),
        ]
    )
    workload = recorded(log)
    assert [a.allocation_id for a in workload.allocations if a.preempted] == ["3.1"]
    assert [a.allocation_id for a in workload.allocations if a.ended_at_ns == T0 + 50 * S + 10**6] == ["1.1"]
    outcome = simulate(workload)
    assert simulated_assignments(outcome.assigned) == recorded_assignments(workload.allocations)
    said = report(workload, outcome)
    assert [line.simulated for line in said.jobs] == [line.recorded for line in said.jobs]


def test_another_scheduler_replays_the_same_work(generated: api_pb2.GetWorkloadResponse) -> None:
    settings = Settings(scheduler="priority")
    assert not as_recorded(generated, settings)
    outcome = simulate(generated, settings)
    said = report(generated, outcome)
    assert said.total.recorded == report(generated, simulate(generated)).total.recorded
    assert {line.job_id for line in said.jobs} == {a.job_id for a in generated.allocations}
    runs = {run.allocation_id for run in outcome.runs}
    assert {a.allocation_id for a in generated.allocations} <= runs


def allocation(allocation_id: str, **fields: Any) -> api_pb2.RecordedAllocation:
    task_id = allocation_id.partition(".")[0]
    defaults: dict[str, Any] = {
        "task_id": task_id,
        "job_id": f"experiment/{task_id}",
        "task_type": "TRIAL",
        "resource_pool": "default",
        "slots": 1,
        "priority": 42,
        "weight": 1.0,
        "preemptible": True,
    }
    return api_pb2.RecordedAllocation(allocation_id=allocation_id, **{**defaults, **fields})


def ran(allocation_id: str, requested_s: float, assigned_s: float, ended_s: float, **fields: Any) -> Any:
    return allocation(
        allocation_id,
        requested_at_ns=T0 + int(requested_s * S),
        assigned_at_ns=T0 + int(assigned_s * S),
        ended_at_ns=T0 + int(ended_s * S),
        run_ns=int((ended_s - assigned_s) * S),
        **fields,
    )


def workload(*allocations: api_pb2.RecordedAllocation, agents: int = 1) -> api_pb2.GetWorkloadResponse:
    recorded_agents = [
        api_pb2.RecordedAgent(agent_id=f"agent-{n}", resource_pool="default", slots=1, registered_at_ns=T0)
        for n in range(agents)
    ]
    return api_pb2.GetWorkloadResponse(
        allocations=allocations, agents=recorded_agents, pool_schedulers={"default": "fair_share"}
    )


def spans(outcome: Outcome) -> dict[str, tuple[float, float, float]]:
    """Run id -> (requested, assigned, ended) in seconds from T0."""
    return {
        run.allocation_id: tuple(
            (t - T0) / S if t else -1 for t in (run.requested_at_ns, run.assigned_at_ns, run.ended_at_ns)
        )  # type: ignore[misc]
        for run in outcome.runs
    }


def test_a_preempted_allocation_comes_back_with_the_rest_of_its_run() -> None:
    """Priority: the urgent job's request preempts the other once it ran
    min_run_s; the rest of the preempted run is asked for again at its exit."""
    recorded_work = workload(
        ran("1.1", 0, 0, 100, priority=50),
        ran("2.1", 40, 100, 120, priority=10),
    )
    outcome = simulate(recorded_work, Settings(scheduler="priority", min_run_s=30), end_ns=T0 + 200 * S)
    assert spans(outcome) == {"1.1": (0, 0, 40), "2.1": (40, 40, 60), "1.1~1": (40, 60, 120)}
    assert [run.allocation_id for run in outcome.assigned] == ["1.1", "2.1", "1.1~1"]
    assert outcome.runs[0].preempted


def test_a_tasks_next_allocation_follows_the_one_before_and_stops_keep_their_place() -> None:
    """On one agent instead of two, trial 2 waits for trial 1: its searcher's
    stop comes as far into its run (then it takes as long to exit), and its
    second allocation as long after the first ended as it was."""
    recorded_work = workload(
        ran("1.1", 0, 0, 30),
        ran("2.1", 0, 0, 10, stop_requested_at_ns=T0 + 6 * S),
        ran("2.2", 15, 15, 25),
        agents=2,
    )
    outcome = simulate(recorded_work, Settings(agents=1, slots=1), end_ns=T0 + 100 * S)
    assert spans(outcome) == {"1.1": (0, 0, 30), "2.1": (0, 30, 40), "2.2": (45, 45, 55)}
    assert [run.placements for run in outcome.assigned] == [(("sim-1", (0,)),)] * 3


def test_one_stopped_while_it_waited_is_stopped_as_long_after_its_request() -> None:
    """Canceled after 5 s of waiting when it ran; with room, it starts and is
    stopped 5 s after its request, exiting as long after as stops took."""
    recorded_work = workload(
        ran("1.1", 0, 0, 60),
        ran("3.1", 0, 0, 12, stop_requested_at_ns=T0 + 10 * S),
        allocation("2.1", requested_at_ns=T0, stop_requested_at_ns=T0 + 5 * S, ended_at_ns=T0 + 5 * S),
        agents=2,
    )
    as_ran = simulate(recorded_work)
    assert spans(as_ran)["2.1"] == (0, -1, 5)
    more = simulate(recorded_work, Settings(agents=3), end_ns=T0 + 100 * S)
    assert spans(more)["2.1"] == (0, 0, 7)


def test_what_still_ran_at_the_end_runs_on() -> None:
    running = allocation("1.1", requested_at_ns=T0, assigned_at_ns=T0, run_ns=50 * S)
    outcome = simulate(workload(running, ran("2.1", 10, 10, 20), agents=2))
    assert spans(outcome) == {"1.1": (0, 0, -1), "2.1": (10, 10, 20)}
    said = report(workload(running, ran("2.1", 10, 10, 20), agents=2), outcome)
    assert said.total.recorded.slot_ns == said.total.simulated.slot_ns == 60 * S


def test_agents_and_slots_replace_the_recorded_agents_in_each_pool() -> None:
    recorded_work = workload(ran("1.1", 0, 0, 1), allocation("2.1", resource_pool="gpu"), agents=2)
    made = agents_of(recorded_work, agents=2, slots=8)
    assert [(a.agent_id, a.resource_pool, a.slots) for a in made] == [
        ("sim-1", "default", 8),
        ("sim-2", "default", 8),
        ("gpu-sim-1", "gpu", 8),
        ("gpu-sim-2", "gpu", 8),
    ]
    assert [(a.agent_id, a.slots) for a in agents_of(recorded_work, slots=4)] == [("sim-1", 4), ("sim-2", 4)]
    assert [(a.agent_id, a.slots) for a in agents_of(recorded_work, agents=3)][:1] == [("sim-1", 1)]


def test_the_report_counts_waits_and_slot_time_within_the_window() -> None:
    recorded_work = workload(ran("1.1", 0, 10, 30, slots=2), ran("2.1", 5, 30, 50))
    outcome = simulate(recorded_work, end_ns=T0 + 40 * S)
    said = report(recorded_work, outcome, start_ns=T0 + 20 * S)
    first, second = said.jobs
    assert (first.recorded.queue_ns, first.recorded.slot_ns) == (0, 2 * 10 * S)
    assert (second.recorded.queue_ns, second.recorded.slot_ns) == (10 * S, 10 * S)
    assert said.total.recorded.slot_ns == 30 * S


def test_a_departure_from_the_recording_is_named() -> None:
    recorded_work = workload(ran("1.1", 0, 0, 10), ran("2.1", 0, 10, 20))
    recorded_work.allocations[0].assigned_sequence = 2
    recorded_work.allocations[0].placements.add(agent_id="agent-0", slot_ids=[0])
    recorded_work.allocations[1].assigned_sequence = 3
    recorded_work.allocations[1].placements.add(agent_id="agent-9", slot_ids=[0])
    said = report(recorded_work, simulate(recorded_work))
    assert (said.reproduced, said.assignments) == (1, 2)
    assert said.difference == (
        "assignment 2: recorded allocation 2.1 on agent-9 slots [0], simulated allocation 2.1 on agent-0 slots [0]"
    )


def test_a_notebook_runs_on_one_agent_as_it_did() -> None:
    notebook = ran("4.1", 0, 0, 10, task_type="NOTEBOOK", slots=2, job_id="task/4", preemptible=False)
    trial = ran("5.1", 0, 0, 10, slots=2)
    outcome = simulate(workload(notebook, trial, agents=2), Settings(agents=2, slots=1), end_ns=T0 + 20 * S)
    assert spans(outcome) == {"4.1": (0, -1, -1), "5.1": (0, 0, 10)}  # a trial's gang may span agents
