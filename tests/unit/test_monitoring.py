"""The pure parts of /metrics (services/gateway/features/monitoring/): whose
consumer is whose and its lag, trials' start phases as their events come,
the runs' states from the grouped columns, and the families a scrape shows."""

import itertools

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from determined.common import states
from determined.proto import api_pb2, events_pb2
from services.common.envelope import Append, wrap
from services.common.eventlog import StoredEvent
from services.common.job_queue import JobView, PublishedQueue
from services.gateway.features.monitoring import families
from services.gateway.features.monitoring.consumers import SERVICES, Consumer, following, lags, reader_of
from services.gateway.features.monitoring.observed import TYPE_NAMES, EventTypes, StartPhases
from services.gateway.features.monitoring.queries import Counts, run_state
from services.gateway.features.trials.queries import run_outcome


def test_a_consumer_is_its_inbox_users() -> None:
    assert reader_of("_INBOX.scheduler.x9Yz") == "scheduler"
    assert reader_of("_INBOX.agent:gpu~node~1.abc") == "agent:gpu.node.1"
    for other in (
        "_INBOX.gateway.abc",
        "_INBOX.operator.abc",
        "_INBOX.abc",
        "_INBOX.agent:.abc",
        "x.scheduler.y",
        "",
    ):
        assert reader_of(other) is None, other


def test_lag_is_the_sum_over_kinds_of_the_furthest_behind() -> None:
    consumers = [
        Consumer("_INBOX.scheduler.a", "det.events.allocation.>", 3),
        Consumer("_INBOX.scheduler.b", "det.events.agent.>", 2),
        # A consumer being replaced after an outage, or a second scheduler: the one further behind.
        Consumer("_INBOX.scheduler.c", "det.events.allocation.>", 7),
        Consumer("_INBOX.agent:a1.d", "det.events.allocation.>", 1),
        Consumer("_INBOX.gateway.e", "det.events.trial.>", 100),
    ]
    assert lags(consumers) == {"checkpoint": 0, "scheduler": 9, "searcher": 0, "agent:a1": 1}
    assert following(consumers) == {
        "agent:a1": True,
        "checkpoint": False,
        "scheduler": True,
        "searcher": False,
    }
    assert set(SERVICES) == {"checkpoint", "scheduler", "searcher"}


def _stored(payload: object, at_s: float, sequence: int = 1) -> StoredEvent:
    append = Append("allocation/x", payload, f"m{sequence}")  # type: ignore[arg-type]
    return StoredEvent(sequence, wrap(append, actor="service:test", occurred_at_ns=int(at_s * 1e9)), False)


def _start(allocation_id: str = "7.1", trial_id: int = 7, run: int = 1) -> list[StoredEvent]:
    """A trial run's start: requested at 0 s, assigned at 2, started at 2.5, reported at 10."""
    return [
        _stored(events_pb2.AllocationRequested(allocation_id=allocation_id, task_type="TRIAL"), 0),
        _stored(events_pb2.AllocationAssigned(allocation_id=allocation_id), 2),
        _stored(events_pb2.AllocationStarted(allocation_id=allocation_id), 2.5),
        _stored(events_pb2.TrialMetricsReported(trial_id=trial_id, trial_run_id=run), 10),
    ]


def test_a_trial_runs_start_phases_are_measured_once() -> None:
    recorded: list[tuple[str, float]] = []
    phases = StartPhases(lambda phase, seconds: recorded.append((phase, seconds)))
    phases.observe(_start())
    # Later reports, a second agent's start of a gang, a checkpoint: nothing more.
    phases.observe(
        [
            _stored(events_pb2.AllocationStarted(allocation_id="7.1"), 11),
            _stored(events_pb2.TrialMetricsReported(trial_id=7, trial_run_id=1), 12),
            _stored(events_pb2.CheckpointReported(allocation_id="7.1"), 13),
        ]
    )
    assert recorded == [
        ("requested_to_assigned", 2.0),
        ("assigned_to_started", 0.5),
        ("started_to_first_report", 7.5),
    ]
    assert phases.reached == phases.started == {}


def test_a_phase_is_measured_only_when_its_beginning_was_seen() -> None:
    recorded: list[tuple[str, float]] = []
    phases = StartPhases(lambda phase, seconds: recorded.append((phase, seconds)))
    requested, assigned, started, reported = _start()
    phases.observe([assigned, started, reported])  # requested before the gateway started
    task = events_pb2.AllocationRequested(allocation_id="uuid.1", task_type="NOTEBOOK")
    phases.observe([_stored(task, 0), _stored(events_pb2.AllocationAssigned(allocation_id="uuid.1"), 1)])
    assert recorded == [] and phases.reached == phases.started == {}
    # Canceled before it was assigned; exited before its first report: forgotten.
    phases.observe([requested, _stored(events_pb2.AllocationCanceled(allocation_id="7.1"), 1)])
    phases.observe(
        [requested, assigned, started, _stored(events_pb2.AllocationExited(allocation_id="7.1"), 3)]
    )
    assert [phase for phase, _ in recorded] == ["requested_to_assigned", "assigned_to_started"]
    assert phases.reached == phases.started == {}


def test_a_skewed_clock_gives_no_negative_phase_and_validation_or_checkpoint_is_a_report() -> None:
    recorded: list[tuple[str, float]] = []
    phases = StartPhases(lambda phase, seconds: recorded.append((phase, seconds)))
    requested, assigned, started, _ = _start("9.2", 9, 2)
    phases.observe([requested, _stored(events_pb2.AllocationAssigned(allocation_id="9.2"), -1), started])
    phases.observe([_stored(events_pb2.TrialValidationReported(trial_id=9, trial_run_id=2), 4)])
    requested, assigned, started, _ = _start("9.3", 9, 3)
    phases.observe(
        [requested, assigned, started, _stored(events_pb2.CheckpointReported(allocation_id="9.3"), 3)]
    )
    assert recorded[0] == ("requested_to_assigned", 0.0)
    assert recorded[2] == ("started_to_first_report", 1.5)
    assert recorded[-1] == ("started_to_first_report", 0.5)


def test_the_runs_awaited_are_bounded() -> None:
    phases = StartPhases(lambda phase, seconds: None, limit=2)
    for index in range(3):
        phases.observe(_start(f"{index}.1", index)[:1])
    assert list(phases.reached) == ["1.1", "2.1"]


def test_events_are_counted_by_type_name() -> None:
    types = EventTypes()
    types.observe(
        _start() + [StoredEvent(9, events_pb2.Envelope(), False, "not an event envelope")]
    )  # an unreadable one: empty
    assert types.by_type() == {
        "AllocationRequested": 1,
        "AllocationAssigned": 1,
        "AllocationStarted": 1,
        "TrialMetricsReported": 1,
        "unreadable": 1,
    }
    assert TYPE_NAMES["user_login_failed"] == "UserLoginFailed"


_GROUP_COLUMNS = (
    "canceled",
    "open",
    "placed",
    "agent_lost",
    "stop_requested",
    "killed",
    "exit_zero",
    "has_error",
)


@pytest.mark.parametrize("values", list(itertools.product((False, True), repeat=len(_GROUP_COLUMNS))))
def test_a_runs_group_has_the_state_of_its_rows(values: tuple[bool, ...]) -> None:
    group = dict(zip(_GROUP_COLUMNS, values, strict=True))
    row = {
        "canceled": group["canceled"],
        "exited_at_ns": None if group["open"] else 123,
        "placements": [{"agent_id": "a1", "slot_ids": [0]}] if group["placed"] else None,
        "agent_lost": group["agent_lost"],
        "stop_requested": group["stop_requested"],
        "killed": group["killed"],
        "exit_code": 0 if group["exit_zero"] else (None if group["has_error"] else 137),
        "error": "it failed" if group["has_error"] else "",
        "stop_reason": "the searcher is done",
    }
    assert run_state(group) == run_outcome(row)[0]
    assert run_state(group) in set(states.AllocationState)


class _Fixed(Collector):
    def __init__(self, scraped: list[Metric]) -> None:
        self.scraped = scraped

    def collect(self) -> list[Metric]:  # type: ignore[override]
        return self.scraped


def _text(scraped: list[Metric]) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed(scraped))
    return generate_latest(registry).decode()


def test_the_families_in_prometheus_text() -> None:
    agents = [
        api_pb2.Agent(
            resource_pool="default",
            state="ENABLED",
            slot_uses=[api_pb2.SlotUse(slot_id=0, allocation_id="7.1"), api_pb2.SlotUse(slot_id=1)],
        ),
        api_pb2.Agent(resource_pool="gpu", state="LOST", slot_uses=[api_pb2.SlotUse(slot_id=0)]),
    ]
    queue = PublishedQueue(
        jobs=(
            JobView("experiment/1", "default", 42, 1.0, 0, 1, 1, 0, "QUEUED", 1, "waiting for a slot"),
            JobView("experiment/2", "default", 42, 1.0, 0, 2, 1, 1, "SCHEDULED", 2, ""),
        )
    )
    text = _text(
        families.log_families(120, 118)
        + families.lag_families({"projector": 2, "scheduler": 0}, {"scheduler": True})
        + families.count_families(Counts({"RUNNING": 2}, {"QUEUED": 1}, {("NOTEBOOK", "RUNNING"): 1}))
        + families.agent_families(agents)
        + families.queue_families(queue, ["default", "gpu"])
        + families.gateway_families({"TrialCreated": 4}, 3)
        + families.source_families({"consumers": False, "event_log": True})
    )
    for line in (
        "det_events_appended_total 120.0",
        "det_projector_applied_sequence 118.0",
        "det_events_skipped_total 3.0",
        'det_consumer_lag_events{consumer="projector"} 2.0',
        'det_consumer_following{consumer="scheduler"} 1.0',
        'det_trials{state="RUNNING"} 2.0',
        'det_allocations{state="QUEUED"} 1.0',
        'det_allocations{state="AGENT_LOST"} 0.0',
        'det_trials{state="ERROR"} 0.0',
        'det_tasks{state="PENDING",task_type="SHELL"} 0.0',
        'det_tasks{state="RUNNING",task_type="NOTEBOOK"} 1.0',
        'det_agents{resource_pool="default",state="ENABLED"} 1.0',
        'det_agents{resource_pool="gpu",state="LOST"} 1.0',
        'det_slots{resource_pool="default",state="used"} 1.0',
        'det_slots{resource_pool="default",state="free"} 1.0',
        'det_jobs{resource_pool="default",state="QUEUED"} 1.0',
        'det_jobs{resource_pool="gpu",state="QUEUED"} 0.0',
        'det_events_projected_total{type="TrialCreated"} 4.0',
        'det_metrics_source_up{source="consumers"} 0.0',
    ):
        assert line in text.splitlines(), line
    assert 'resource_pool="gpu",state="free"' not in text  # a lost agent's slots are no capacity
