"""Row building: which statements and rows each event gives."""

import json

from determined.proto import events_pb2 as ev
from services.common.envelope import Append, wrap
from services.gateway import projection


def envelope(payload: object, at: int = 100, aggregate: str = "x/1") -> ev.Envelope:
    return wrap(Append(aggregate, payload, "m"), actor="service:test", occurred_at_ns=at)  # type: ignore[arg-type]


def requested(trial_id: int, run_id: int, resumed_at: int = 0) -> ev.AllocationRequested:
    launch = ev.TrialLaunch(trial_id=trial_id, trial_run_id=run_id, steps_completed=resumed_at)
    return ev.AllocationRequested(allocation_id=f"{trial_id}.{run_id}", task_id=str(trial_id), trial=launch)


def training(trial_id: int, run_id: int, *steps: int) -> ev.TrialMetricsReported:
    reports = [ev.MetricReport(group="training", steps_completed=s, metrics_json=f'{{"loss": {s}}}') for s in steps]
    return ev.TrialMetricsReported(trial_id=trial_id, trial_run_id=run_id, reports=reports)


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
        (1, "validation", 20, 1, '{"loss": 3}', 50, False),
        (1, "training", 10, 1, '{"loss": 2}', 5, False),
    ]
    assert plan.metric_columns()[0] == [1, 1]
    assert plan.total_batches == {1: 20}
    assert plan.statements == []


def test_a_validation_is_a_point_of_the_validation_group() -> None:
    validation = ev.TrialValidationReported(trial_id=2, trial_run_id=3, steps_completed=40, metrics_json='{"a": 1}')
    plan = projection.plan_batch([envelope(validation, at=9)])
    assert list(plan.metric_rows.values()) == [(2, "validation", 40, 3, '{"a": 1}', 9, False)]
    assert plan.total_batches == {2: 40}


def test_a_request_makes_the_run_current_and_an_assignment_places_it() -> None:
    placements = [ev.Placement(agent_id="a", slot_ids=[0, 1]), ev.Placement(agent_id="b", slot_ids=[0])]
    assigned = ev.AllocationAssigned(allocation_id="4.2", task_id="4", placements=placements)
    exited = ev.AllocationExited(allocation_id="4.2", trial_id=4, exit_code=3, agent_lost=True)
    plan = projection.plan_batch([envelope(requested(4, 2, resumed_at=7), at=1), envelope(assigned, at=2),
                                  envelope(exited, at=3)])
    placed = '[{"agent_id": "a", "slot_ids": [0, 1]}, {"agent_id": "b", "slot_ids": [0]}]'
    assert plan.statements == [
        (projection.ALLOCATION_REQUESTED, ("4.2", 4, 2, 1)),
        (projection.TRIAL_RUN_REQUESTED, (4, "4.2", 2, 7)),
        (projection.METRICS_SUPERSEDED, (4, 2, 7)),
        (projection.ALLOCATION_ASSIGNED, ("4.2", placed, 2)),
        (projection.ALLOCATION_EXITED, ("4.2", 3, 3, False, "", True)),
    ]


def test_an_old_assignment_reads_as_a_request_and_an_assignment() -> None:
    old = ev.AllocationAssigned(allocation_id="5.1", trial_id=5, trial_run_id=1, agent_id="a", slot_ids=[2],
                                config_json="{}", experiment_id=1)
    plan = projection.plan_batch([envelope(old, at=8)])
    assert plan.statements == [
        (projection.ALLOCATION_REQUESTED, ("5.1", 5, 1, 8)),
        (projection.TRIAL_RUN_REQUESTED, (5, "5.1", 1, 0)),
        (projection.METRICS_SUPERSEDED, (5, 1, 0)),
        (projection.ALLOCATION_ASSIGNED, ("5.1", '[{"agent_id": "a", "slot_ids": [2]}]', 8)),
    ]


def test_a_resumed_run_supersedes_the_points_past_its_resume_point() -> None:
    batch = [training(1, 1, 10, 20, 30), training(2, 1, 30), requested(1, 2, resumed_at=20), training(1, 2, 30, 40)]
    plan = projection.plan_batch([envelope(payload) for payload in batch])
    shown = {key: row[-1] for key, row in plan.metric_rows.items()}
    assert shown == {
        (1, "training", 10, 1): False,
        (1, "training", 20, 1): False,
        (1, "training", 30, 1): True,
        (2, "training", 30, 1): False,
        (1, "training", 30, 2): False,
        (1, "training", 40, 2): False,
    }
    assert plan.total_batches == {1: 40, 2: 30}


def test_a_resume_lowers_the_batches_a_trial_got_through() -> None:
    plan = projection.plan_batch([envelope(training(1, 1, 10, 30)), envelope(requested(1, 2, resumed_at=20))])
    assert plan.total_batches == {1: 20}


def test_a_superseded_point_reported_again_stays_superseded() -> None:
    batch = [training(1, 1, 30), requested(1, 2, resumed_at=20), training(1, 1, 30)]
    plan = projection.plan_batch([envelope(payload) for payload in batch])
    assert [row[-1] for row in plan.metric_rows.values()] == [True]


def test_searcher_and_user_decisions_of_a_trial() -> None:
    batch = [
        ev.TrialCreated(trial_id=3, experiment_id=1, length=100),
        ev.TrialLengthSet(trial_id=3, rung=1, length=300),
        ev.TrialStopRequested(trial_id=3, reason="cut at rung 1 (300 batches)", rung=1),
        ev.TrialStatusReported(trial_id=3, status="evaluating"),
        ev.TrialKillRequested(trial_id=3),
        ev.ExperimentProgressChanged(experiment_id=1, progress=0.25),
    ]
    statements = projection.plan_batch([envelope(payload, at=5) for payload in batch]).statements
    assert statements[0] == (projection.TRIAL_CREATED, (3, 1, "", "", 0, 5, 100))
    assert statements[1:] == [
        (projection.TRIAL_LENGTH_SET, (3, 1, 300)),
        (projection.TRIAL_STOP_REQUESTED, (3, "cut at rung 1 (300 batches)")),
        (projection.TRIAL_STATUS, (3, "evaluating")),
        (projection.TRIAL_KILL_REQUESTED, (3,)),
        (projection.EXPERIMENT_PROGRESS, (1, 0.25)),
    ]


def test_stop_requests_acknowledgements_and_cancels_of_an_allocation() -> None:
    batch = [
        ev.AllocationStopRequested(allocation_id="1.1", task_id="1", reason="experiment paused"),
        ev.AllocationStopAcknowledged(allocation_id="1.1", task_id="1"),
        ev.AllocationCanceled(allocation_id="1.2", task_id="1", reason="stopped"),
    ]
    assert projection.plan_batch([envelope(payload) for payload in batch]).statements == [
        (projection.ALLOCATION_STOP_REQUESTED, ("1.1", "experiment paused")),
        (projection.ALLOCATION_STOP_ACKNOWLEDGED, ("1.1",)),
        (projection.ALLOCATION_CANCELED, ("1.2",)),
    ]


def test_checkpoints_use_the_reported_time_and_sorted_resources() -> None:
    reported = ev.CheckpointReported(uuid="u", trial_id=1, resources={"b": 2, "a": 1}, reported_at_ns=8)
    [(_, row)] = projection.plan_batch([envelope(reported, at=99)]).statements
    assert row[6:] == ('{"a": 1, "b": 2}', 8)


def test_unknown_and_stateless_events_change_nothing() -> None:
    kill = ev.AllocationKillRequested(allocation_id="1.1")
    assert projection.plan_batch([envelope(kill), ev.Envelope(event_id="future")]).statements == []


def test_watched_aggregates_are_those_whose_stop_or_length_changed() -> None:
    batch = [
        ev.AllocationStopRequested(allocation_id="1.1"),
        ev.AllocationExited(allocation_id="2.1"),
        ev.TrialLengthSet(trial_id=3),
        ev.TrialStopRequested(trial_id=4),
        training(5, 1, 10),
        ev.AllocationStarted(allocation_id="6.1"),
    ]
    watched = projection.watched([envelope(payload) for payload in batch])
    assert watched == {"allocation/1.1", "allocation/2.1", "trial/3", "trial/4"}


def test_early_exits_keep_the_first_reason_and_metadata_is_replaced_whole() -> None:
    batch = [
        ev.TrialEarlyExitReported(trial_id=3, experiment_id=1, reason="INVALID_HP"),
        ev.TrialMetadataSet(trial_id=3, experiment_id=1, metadata_json='{"a":1}'),
        ev.TrialMetadataSet(trial_id=3, experiment_id=1),
    ]
    assert projection.plan_batch([envelope(payload) for payload in batch]).statements == [
        (projection.TRIAL_EARLY_EXIT, (3, "INVALID_HP")),
        (projection.TRIAL_METADATA_SET, (3, '{"a":1}')),
        (projection.TRIAL_METADATA_SET, (3, "{}")),
    ]
    assert "COALESCE(early_exit_reason, $2)" in projection.TRIAL_EARLY_EXIT
