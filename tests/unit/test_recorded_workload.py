"""The recorded workload (GetWorkload's pure part,
services/gateway/features/events/workload.py): each allocation's request,
settings, assignment, run, final stop and end, with their sequences; the
agents' registrations; the window; what cannot be read or makes no sense."""

from typing import Any

import pytest
from google.protobuf.message import Message

from determined.proto import events_pb2
from services.common.envelope import Append, Envelope, wrap
from services.common.eventlog import StoredEvent
from services.common.job_queue import PublishedQueue
from services.gateway.errors import FailedPreconditionError
from services.gateway.features.events import workload as workload_module
from services.gateway.features.events.workload import WorkloadRecorder

S = 10**9


class Log:
    """Stored events, one per second from 1 s, sequences from 1."""

    def __init__(self) -> None:
        self.events: list[StoredEvent] = []

    def add(self, aggregate: str, payload: Message, event_id: str = "", actor: str = "service:x") -> None:
        sequence = len(self.events) + 1
        append = Append(aggregate, payload, event_id or f"e{sequence}")
        envelope = wrap(append, actor=actor, occurred_at_ns=sequence * S)
        self.events.append(StoredEvent(sequence, envelope, caught_up=False))

    def request(self, allocation_id: str, **fields: Any) -> None:
        task_id = allocation_id.partition(".")[0]
        requested = events_pb2.AllocationRequested(
            allocation_id=allocation_id, task_id=task_id, task_type="TRIAL", slots=1, **fields
        )
        self.add(f"allocation/{allocation_id}", requested)

    def assign(self, allocation_id: str, agent_id: str = "a1") -> None:
        placement = events_pb2.Placement(agent_id=agent_id, slot_ids=[0])
        self.add(
            f"allocation/{allocation_id}",
            events_pb2.AllocationAssigned(allocation_id=allocation_id, placements=[placement]),
        )

    def stop(self, allocation_id: str, event_id: str = "") -> None:
        stop = events_pb2.AllocationStopRequested(allocation_id=allocation_id)
        self.add(f"allocation/{allocation_id}", stop, event_id)

    def exit(self, allocation_id: str) -> None:
        self.add(f"allocation/{allocation_id}", events_pb2.AllocationExited(allocation_id=allocation_id))

    def folded(self, recorder: WorkloadRecorder | None = None) -> Any:
        recorder = recorder or WorkloadRecorder()
        for stored in self.events:
            recorder.fold(stored)
        return recorder.response(PublishedQueue(pool_types={"gpu": "priority"}))


def test_an_allocation_is_recorded_with_its_moments_and_sequences() -> None:
    log = Log()
    log.request("7.1", job_id="experiment/3", owner="alice", resource_pool="gpu", preemptible=True)
    log.assign("7.1")
    log.stop("7.1", "allocation-preempt-7.1")
    log.exit("7.1")
    [recorded] = log.folded().allocations
    assert (recorded.job_id, recorded.owner, recorded.resource_pool, recorded.preemptible) == (
        "experiment/3",
        "alice",
        "gpu",
        True,
    )
    assert (recorded.requested_at_ns, recorded.assigned_at_ns, recorded.ended_at_ns) == (S, 2 * S, 4 * S)
    assert (recorded.requested_sequence, recorded.assigned_sequence, recorded.ended_sequence) == (1, 2, 4)
    assert (recorded.stop_requested_at_ns, recorded.stop_sequence, recorded.preempted) == (3 * S, 3, True)
    assert recorded.run_ns == 2 * S
    assert [p.agent_id for p in recorded.placements] == ["a1"]


def test_settings_in_force_at_the_request_and_the_published_default_priority() -> None:
    log = Log()
    log.request("1.1", job_id="experiment/1", weight=2.0)
    change = events_pb2.JobResourcesChanged(job_id="experiment/1", priority=5, max_slots=3)
    log.add("experiment/1", change)
    log.request("1.2", job_id="experiment/1")
    log.request("9.1")  # a task's: job task/9
    first, second, task = log.folded(WorkloadRecorder(default_priority=50)).allocations
    assert (first.priority, first.weight, first.max_slots) == (50, 2.0, 0)
    assert (second.priority, second.weight, second.max_slots) == (5, 1.0, 3)
    assert task.job_id == "task/9"


def test_only_a_stop_that_stands_counts_and_a_kill_is_one() -> None:
    log = Log()
    log.request("1.1")
    log.assign("1.1")
    log.stop("1.1", "pause-stop")
    log.add(
        "allocation/1.1", events_pb2.AllocationStopWithdrawn(allocation_id="1.1", stop_event_id="pause-stop")
    )
    log.request("2.1")
    log.assign("2.1")
    log.add("allocation/2.1", events_pb2.AllocationKillRequested(allocation_id="2.1"))
    log.stop("2.1")
    withdrawn, killed = log.folded().allocations
    assert (withdrawn.stop_requested_at_ns, withdrawn.stop_sequence) == (0, 0)
    assert (killed.stop_sequence, killed.preempted) == (7, False)


def test_agents_one_per_registration_lost_only_by_their_own_registration() -> None:
    log = Log()
    slots = [events_pb2.Slot(slot_id=n) for n in range(4)]
    log.add("agent/a1", events_pb2.AgentRegistered(agent_id="a1", slots=slots), "reg-1")
    log.add("agent/a1", events_pb2.AgentLost(agent_id="a1", registration_event_id="reg-0"))
    log.add("agent/a1", events_pb2.AgentLost(agent_id="a1", registration_event_id="reg-1"))
    log.add("agent/a1", events_pb2.AgentRegistered(agent_id="a1", slots=slots, resource_pool="gpu"), "reg-2")
    answer = log.folded()
    assert answer.pool_schedulers == {"default": "fair_share", "gpu": "priority"}
    first, second = answer.agents
    assert (first.slots, first.resource_pool, first.lost_at_ns, first.lost_sequence) == (
        4,
        "default",
        3 * S,
        3,
    )
    assert (second.resource_pool, second.registered_sequence, second.lost_at_ns) == ("gpu", 4, 0)


def test_the_window_keeps_what_was_requested_in_it_or_still_open_when_it_began() -> None:
    log = Log()
    for allocation_id in ("1.1", "2.1", "3.1"):
        log.request(allocation_id)  # at 1, 2, 3 s
    log.exit("1.1")  # at 4 s
    log.assign("2.1")  # at 5 s
    log.request("4.1")  # at 6 s
    log.request("5.1")  # at 7 s
    log.exit("2.1")  # at 8 s: after the window, still its run
    window = log.folded(WorkloadRecorder(since_ns=5 * S, until_ns=6 * S))
    assert [a.allocation_id for a in window.allocations] == ["2.1", "3.1", "4.1"]
    assert window.allocations[0].run_ns == 3 * S
    assert (window.first_sequence, window.last_sequence) == (2, 8)
    assert window.pool_schedulers == {"default": "fair_share"}


def test_one_still_running_ran_until_the_newest_event() -> None:
    log = Log()
    log.request("1.1")
    log.assign("1.1")
    log.request("2.1")
    [running, waiting] = log.folded().allocations
    assert (running.run_ns, running.ended_at_ns) == (S, 0)
    assert (waiting.run_ns, waiting.assigned_at_ns) == (0, 0)


def test_what_cannot_be_read_or_makes_no_sense_changes_nothing() -> None:
    log = Log()
    log.assign("8.1")  # never requested
    log.exit("8.1")
    log.request("1.1")
    log.request("1.1")  # again
    log.exit("1.1")
    log.assign("1.1")  # after its end
    log.events.append(StoredEvent(len(log.events) + 1, Envelope(), caught_up=False, skipped="not protobuf"))
    [recorded] = log.folded().allocations
    assert (recorded.requested_sequence, recorded.ended_sequence, recorded.assigned_at_ns) == (3, 5, 0)


def test_the_workload_is_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workload_module, "MAX_ALLOCATIONS", 2)
    log = Log()
    for allocation_id in ("1.1", "2.1", "3.1"):
        log.request(allocation_id)
    with pytest.raises(FailedPreconditionError, match="more than 2 allocations"):
        log.folded()
