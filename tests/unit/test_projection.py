"""Row building: which statements and rows each event gives."""

import json

from determined.proto import events_pb2 as ev
from services.common.envelope import Append, wrap
from services.gateway import projection


def envelope(payload: object, at: int = 100, aggregate: str = "x/1") -> ev.Envelope:
    return wrap(Append(aggregate, payload, "m"), actor="service:test", occurred_at_ns=at)  # type: ignore[arg-type]


def test_experiment_created_reads_its_config() -> None:
    config = {"searcher": {"name": "single", "metric": "acc", "smaller_is_better": False},
              "resources": {"resource_pool": "gpu"}, "labels": ["a"], "description": "d"}
    created = ev.ExperimentCreated(experiment_id=3, name="n", owner="o", config_json=json.dumps(config))
    plan = projection.plan_batch([envelope(created, at=7)])
    [(sql, row)] = plan.statements
    assert sql == projection.EXPERIMENT_CREATED
    assert row[:6] == (3, "n", "o", "PAUSED", 7, "d")
    assert row[6:11] == ('["a"]', "gpu", "single", "acc", False)


def test_states_lose_their_prefix_and_terminal_ones_end() -> None:
    changed = ev.ExperimentStateChanged(experiment_id=1, state=ev.EXPERIMENT_STATE_ERROR, reason="why")
    paused = ev.ExperimentStateChanged(experiment_id=1, state=ev.EXPERIMENT_STATE_PAUSED)
    plan = projection.plan_batch([envelope(changed, at=9), envelope(paused, at=10)])
    assert [row for _, row in plan.statements] == [(1, "ERROR", 9, "why"), (1, "PAUSED", None, "")]
    ended = ev.TrialEnded(trial_id=2, state=ev.TRIAL_STATE_ERROR, reason="r")
    assert projection.plan_batch([envelope(ended, at=4)]).statements == [
        (projection.TRIAL_ENDED, (2, "ERROR", "r", 4))
    ]


def test_metric_points_keep_the_newest_report_of_a_batch() -> None:
    first = ev.MetricReport(group="training", steps_completed=10, metrics_json='{"loss": 1}')
    again = ev.MetricReport(group="training", steps_completed=10, metrics_json='{"loss": 2}', reported_at_ns=5)
    later = ev.MetricReport(group="validation", steps_completed=20, metrics_json='{"loss": 3}')
    batch = [
        envelope(ev.TrialMetricsReported(trial_id=1, trial_run_id=1, reports=[first, later]), at=50),
        envelope(ev.TrialMetricsReported(trial_id=1, trial_run_id=1, reports=[again]), at=60),
    ]
    plan = projection.plan_batch(batch)
    assert list(plan.metric_rows.values()) == [
        (1, "validation", 20, 1, '{"loss": 3}', 50),
        (1, "training", 10, 1, '{"loss": 2}', 5),
    ]
    assert plan.metric_columns()[0] == [1, 1]
    assert plan.total_batches == {1: 20}
    assert plan.statements == []


def test_allocations_track_the_current_one() -> None:
    assigned = ev.AllocationAssigned(allocation_id="4.2", trial_id=4, trial_run_id=2, agent_id="a", slot_ids=[0, 1])
    exited = ev.AllocationExited(allocation_id="4.2", trial_id=4, exit_code=3)
    plan = projection.plan_batch([envelope(assigned, at=1), envelope(exited, at=2)])
    assert plan.statements == [
        (projection.ALLOCATION_ASSIGNED, ("4.2", 4, 2, "a", "[0, 1]", 1)),
        (projection.TRIAL_CURRENT_ALLOCATION, (4, "4.2")),
        (projection.ALLOCATION_EXITED, ("4.2", 2, 3, False, "")),
    ]


def test_checkpoints_use_the_reported_time_and_sorted_resources() -> None:
    reported = ev.CheckpointReported(uuid="u", trial_id=1, resources={"b": 2, "a": 1}, reported_at_ns=8)
    [(_, row)] = projection.plan_batch([envelope(reported, at=99)]).statements
    assert row[6:] == ('{"a": 1, "b": 2}', 8)


def test_unknown_and_stateless_events_change_nothing() -> None:
    kill = ev.AllocationKillRequested(allocation_id="1.1")
    assert projection.plan_batch([envelope(kill), ev.Envelope(event_id="future")]).statements == []
