"""Row building: the rows a batch of events leaves, folded over the rows
stored before it (projection.Plan.rows), and the metric points it upserts."""

import json
from typing import Any

from determined.proto import events_pb2 as ev
from services.common.envelope import Append, wrap
from services.gateway import projection, watched
from services.gateway.features.experiments.projection import experiment_row
from services.gateway.features.trials.projection import allocation_row, trial_row

Row = dict[str, Any]


def envelope(payload: object, at: int = 100, aggregate: str = "x/1") -> ev.Envelope:
    return wrap(Append(aggregate, payload, "m"), actor="service:test", occurred_at_ns=at)  # type: ignore[arg-type]


def plan(*payloads: object, at: int = 100) -> projection.Plan:
    return projection.plan_batch([envelope(payload, at=at) for payload in payloads])


def written(batch: projection.Plan, **stored: list[Row]) -> dict[str, dict[Any, Row]]:
    """The rows the batch writes back, by table and key, given the stored rows."""
    by_key = {
        table: {row[projection.key_column(table)]: row for row in rows} for table, rows in stored.items()
    }
    return {
        table: {row[projection.key_column(table)]: row for row in rows}
        for table, rows in batch.rows(by_key).items()
        if rows
    }


def experiment(**changes: Any) -> Row:
    created = ev.ExperimentCreated(experiment_id=1, name="e", owner="o", activate=True)
    return {**experiment_row(created, 1), **changes}


def trial(trial_id: int = 3, **changes: Any) -> Row:
    return {**trial_row(ev.TrialCreated(trial_id=trial_id, experiment_id=1), 1), **changes}


def allocation(allocation_id: str = "1.1", **changes: Any) -> Row:
    trial_id, _, run_id = allocation_id.partition(".")
    launch = ev.TrialLaunch(trial_id=int(trial_id), trial_run_id=int(run_id))
    return {**allocation_row(allocation_id, launch, 1), **changes}


def requested(trial_id: int, run_id: int, resumed_at: int = 0) -> ev.AllocationRequested:
    launch = ev.TrialLaunch(trial_id=trial_id, trial_run_id=run_id, steps_completed=resumed_at)
    return ev.AllocationRequested(allocation_id=f"{trial_id}.{run_id}", task_id=str(trial_id), trial=launch)


def training(trial_id: int, run_id: int, *steps: int) -> ev.TrialMetricsReported:
    reports = [
        ev.MetricReport(group="training", steps_completed=s, metrics_json=f'{{"loss": {s}}}') for s in steps
    ]
    return ev.TrialMetricsReported(trial_id=trial_id, trial_run_id=run_id, reports=reports)


def test_experiment_created_reads_its_config() -> None:
    config = {
        "searcher": {"name": "single", "metric": "acc", "smaller_is_better": False},
        "resources": {"resource_pool": "gpu"},
        "labels": ["a"],
        "description": "d",
    }
    created = ev.ExperimentCreated(experiment_id=3, name="n", owner="o", config_json=json.dumps(config))
    row = written(plan(created, at=7))["experiments"][3]
    assert (row["name"], row["owner"], row["state"], row["started_at_ns"], row["description"]) == (
        "n",
        "o",
        "PAUSED",
        7,
        "d",
    )
    assert (row["labels"], row["resource_pool"], row["searcher_name"], row["searcher_metric"]) == (
        '["a"]',
        "gpu",
        "single",
        "acc",
    )
    assert row["smaller_is_better"] is False
    assert (row["ended_at_ns"], row["end_reason"], row["progress"]) == (None, "", None)
    assert row["best_metric"] is None  # raised by the metric statements (test_projection_best_metric.py)


def test_a_creation_keeps_the_stored_row_and_a_change_needs_one() -> None:
    stored = trial(3, progress=0.5)
    replayed = plan(ev.TrialCreated(trial_id=3, experiment_id=1, length=9))
    assert written(replayed, trials=[stored]) == {}
    orphan = plan(
        ev.TrialProgressReported(trial_id=4, progress=0.5), ev.AllocationStarted(allocation_id="9.1")
    )
    assert written(orphan) == {}


def test_states_lose_their_prefix_and_terminal_ones_end_once() -> None:
    errored = ev.ExperimentStateChanged(experiment_id=1, state=ev.EXPERIMENT_STATE_ERROR, reason="why")
    row = written(plan(errored, at=9), experiments=[experiment()])["experiments"][1]
    assert (row["state"], row["ended_at_ns"], row["end_reason"]) == ("ERROR", 9, "why")
    again = written(plan(errored, at=12), experiments=[row])
    assert again == {}  # the first end time stays
    paused = ev.ExperimentStateChanged(experiment_id=1, state=ev.EXPERIMENT_STATE_PAUSED)
    row = written(plan(paused, at=10), experiments=[experiment()])["experiments"][1]
    assert (row["state"], row["ended_at_ns"], row["end_reason"]) == ("PAUSED", None, "")
    ended = ev.TrialEnded(trial_id=3, state=ev.TRIAL_STATE_ERROR, reason="r")
    row = written(plan(ended, at=4), trials=[trial(progress=0.5)])["trials"][3]
    assert (row["state"], row["end_reason"], row["ended_at_ns"], row["progress"]) == ("ERROR", "r", 4, 0.5)
    completed = ev.TrialEnded(trial_id=3, state=ev.TRIAL_STATE_COMPLETED)
    assert written(plan(completed), trials=[trial(progress=0.5)])["trials"][3]["progress"] == 1.0


def test_a_kill_does_not_reopen_an_ended_experiment() -> None:
    kill = ev.ExperimentKillRequested(experiment_id=1)
    assert written(plan(kill), experiments=[experiment()])["experiments"][1]["state"] == "STOPPING_KILLED"
    assert written(plan(kill), experiments=[experiment(state="COMPLETED")]) == {}


def test_metric_points_keep_the_newest_report_of_a_batch() -> None:
    first = ev.MetricReport(group="training", steps_completed=10, metrics_json='{"loss": 1}')
    again = ev.MetricReport(
        group="training", steps_completed=10, metrics_json='{"loss": 2}', reported_at_ns=5
    )
    later = ev.MetricReport(group="validation", steps_completed=20, metrics_json='{"loss": 3}')
    batch = projection.plan_batch(
        [
            envelope(ev.TrialMetricsReported(trial_id=1, trial_run_id=1, reports=[first, later]), at=50),
            envelope(ev.TrialMetricsReported(trial_id=1, trial_run_id=1, reports=[again]), at=60),
        ]
    )
    assert list(batch.metric_rows.values()) == [
        (1, "validation", 20, 1, '{"loss": 3}', 50, False),
        (1, "training", 10, 1, '{"loss": 2}', 5, False),
    ]
    assert batch.metric_columns()[0] == [1, 1]
    assert batch.total_batches == {1: 20}
    assert batch.changes == []


def test_the_batches_a_trial_got_through_are_its_highest_point() -> None:
    assert (
        written(plan(training(3, 1, 10, 30)), trials=[trial(total_batches=20)])["trials"][3]["total_batches"]
        == 30
    )
    assert written(plan(training(3, 1, 10)), trials=[trial(total_batches=20)]) == {}


def test_a_validation_is_a_point_of_the_validation_group() -> None:
    validation = ev.TrialValidationReported(
        trial_id=2, trial_run_id=3, steps_completed=40, metrics_json='{"a": 1}'
    )
    batch = plan(validation, at=9)
    assert list(batch.metric_rows.values()) == [(2, "validation", 40, 3, '{"a": 1}', 9, False)]
    assert batch.total_batches == {2: 40}


def test_a_request_makes_the_run_current_and_an_assignment_places_it() -> None:
    placements = [ev.Placement(agent_id="a", slot_ids=[0, 1]), ev.Placement(agent_id="b", slot_ids=[0])]
    assigned = ev.AllocationAssigned(allocation_id="4.2", task_id="4", placements=placements)
    exited = ev.AllocationExited(allocation_id="4.2", trial_id=4, exit_code=3, agent_lost=True)
    batch = projection.plan_batch(
        [envelope(requested(4, 2, resumed_at=7), at=1), envelope(assigned, at=2), envelope(exited, at=3)]
    )
    rows = written(batch, trials=[trial(4, runs=1, total_batches=10, current_allocation_id="4.1")])
    assert rows["allocations"]["4.2"] == {
        **allocation("4.2"),
        "placements": '[{"agent_id": "a", "slot_ids": [0, 1]}, {"agent_id": "b", "slot_ids": [0]}]',
        "assigned_at_ns": 2,
        "exited_at_ns": 3,
        "exit_code": 3,
        "error": "",
        "agent_lost": True,
    }
    current = rows["trials"][4]
    assert (current["current_allocation_id"], current["runs"], current["total_batches"]) == ("4.2", 2, 7)
    assert batch.superseded == [(4, 2, 7)]


def test_an_old_assignment_reads_as_a_request_and_an_assignment() -> None:
    old = ev.AllocationAssigned(
        allocation_id="5.1",
        trial_id=5,
        trial_run_id=1,
        agent_id="a",
        slot_ids=[2],
        config_json="{}",
        experiment_id=1,
    )
    batch = plan(old, at=8)
    row = written(batch)["allocations"]["5.1"]
    assert (row["trial_id"], row["trial_run_id"], row["requested_at_ns"], row["assigned_at_ns"]) == (
        5,
        1,
        8,
        8,
    )
    assert row["placements"] == '[{"agent_id": "a", "slot_ids": [2]}]'
    assert batch.superseded == [(5, 1, 0)]


def test_a_resumed_run_supersedes_the_points_past_its_resume_point() -> None:
    batch = plan(
        training(1, 1, 10, 20, 30), training(2, 1, 30), requested(1, 2, resumed_at=20), training(1, 2, 30, 40)
    )
    shown = {key: row[-1] for key, row in batch.metric_rows.items()}
    assert shown == {
        (1, "training", 10, 1): False,
        (1, "training", 20, 1): False,
        (1, "training", 30, 1): True,
        (2, "training", 30, 1): False,
        (1, "training", 30, 2): False,
        (1, "training", 40, 2): False,
    }
    assert batch.total_batches == {1: 40, 2: 30}


def test_a_resume_lowers_the_batches_a_trial_got_through() -> None:
    batch = plan(training(1, 1, 10, 30), requested(1, 2, resumed_at=20))
    assert batch.total_batches == {1: 20}
    assert written(batch, trials=[trial(1, total_batches=50)])["trials"][1]["total_batches"] == 20


def test_a_superseded_point_reported_again_stays_superseded() -> None:
    batch = plan(training(1, 1, 30), requested(1, 2, resumed_at=20), training(1, 1, 30))
    assert [row[-1] for row in batch.metric_rows.values()] == [True]


def test_searcher_and_user_decisions_of_a_trial() -> None:
    batch = plan(
        ev.TrialCreated(trial_id=3, experiment_id=1, length=100),
        ev.TrialLengthSet(trial_id=3, rung=1, length=300),
        ev.TrialStopRequested(trial_id=3, reason="cut at rung 1 (300 batches)", rung=1),
        ev.TrialStatusReported(trial_id=3, status="evaluating"),
        ev.TrialKillRequested(trial_id=3),
        ev.ExperimentProgressChanged(experiment_id=1, progress=0.25),
        at=5,
    )
    rows = written(batch, experiments=[experiment()])
    assert rows["trials"][3] == {
        **trial(3),
        "started_at_ns": 5,
        "rung": 1,
        "searcher_length": 300,
        "stop_reason": "cut at rung 1 (300 batches)",
        "status": "evaluating",
        "kill_requested": True,
    }
    assert rows["experiments"][1]["progress"] == 0.25


def test_stop_requests_acknowledgements_and_cancels_of_an_allocation() -> None:
    batch = plan(
        ev.AllocationStopRequested(allocation_id="1.1", task_id="1", reason="experiment paused"),
        ev.AllocationStopRequested(allocation_id="1.1", task_id="1", reason="searcher"),
        ev.AllocationStopAcknowledged(allocation_id="1.1", task_id="1"),
        ev.AllocationCanceled(allocation_id="1.2", task_id="1", reason="stopped"),
    )
    rows = written(batch, allocations=[allocation("1.1"), allocation("1.2")])["allocations"]
    assert rows["1.1"] == {
        **allocation("1.1"),
        "stop_requested": True,
        "stop_reason": "experiment paused",
        "stop_acknowledged": True,
        "stop_requests": '["m"]',  # every event of plan() has the id "m"
    }
    assert rows["1.2"] == {**allocation("1.2"), "canceled": True}


def test_checkpoints_use_the_reported_time_and_sorted_resources() -> None:
    reported = ev.CheckpointReported(uuid="u", trial_id=1, resources={"b": 2, "a": 1}, reported_at_ns=8)
    row = written(plan(reported, at=99))["checkpoints"]["u"]
    assert (row["resources"], row["reported_at_ns"], row["state"]) == ('{"a": 1, "b": 2}', 8, "COMPLETED")
    stored = {**row, "state": "DELETED", "steps_completed": 3}
    again = written(plan(reported, at=99), checkpoints=[stored])["checkpoints"]["u"]
    assert (again["state"], again["steps_completed"]) == ("DELETED", 0)  # replaced, but for its state


def agent(**changes: Any) -> Row:
    return {
        "agent_id": "a",
        "hostname": "h1",
        "slots": "[]",
        "registered_at_ns": 1,
        "resource_pool": "",
        "address": "",
        "runtime": "process",
        "state": "ENABLED",
        "registration_event_id": "reg-1",
        "lost": False,
        "disabled_slots": "{}",
        **changes,
    }


def test_an_agent_registered_again_is_replaced_but_for_what_an_operator_made_of_it() -> None:
    registered = ev.AgentRegistered(
        agent_id="a",
        hostname="h2",
        slots=[ev.Slot(slot_id=0, type="cpu")],
        resource_pool="gpu",
        address="10.0.0.2",
    )
    stored = agent(state="DRAINING", lost=True, disabled_slots='{"0": "DISABLED"}')
    event = wrap(Append("agent/a", registered, "reg-2"), actor="agent:a", occurred_at_ns=5)
    assert written(projection.plan_batch([event]), agents=[stored])["agents"]["a"] == {
        "agent_id": "a",
        "hostname": "h2",
        "slots": '[{"slot_id": 0, "type": "cpu", "device": ""}]',
        "registered_at_ns": 5,
        "resource_pool": "gpu",
        "address": "10.0.0.2",
        "runtime": "process",  # registered before runtimes: it ran trials as processes
        "state": "DRAINING",
        "registration_event_id": event.event_id,
        "lost": False,
        "disabled_slots": '{"0": "DISABLED"}',
    }


def test_an_agent_is_lost_only_in_the_registration_the_scheduler_found_lost() -> None:
    stale = ev.AgentLost(agent_id="a", registration_event_id="reg-0")
    assert written(plan(stale), agents=[agent()]) == {}
    lost = written(plan(ev.AgentLost(agent_id="a", registration_event_id="reg-1")), agents=[agent()])
    assert lost["agents"]["a"]["lost"] is True


def test_an_agent_is_disabled_drained_and_enabled() -> None:
    disabled = written(plan(ev.AgentDisabled(agent_id="a")), agents=[agent()])["agents"]["a"]
    draining = written(plan(ev.AgentDisabled(agent_id="a", drain=True)), agents=[agent()])["agents"]["a"]
    enabled = written(plan(ev.AgentEnabled(agent_id="a")), agents=[disabled])["agents"]["a"]
    assert (disabled["state"], draining["state"], enabled["state"]) == ("DISABLED", "DRAINING", "ENABLED")
    assert written(plan(ev.AgentEnabled(agent_id="unknown")), agents=[]) == {}


def test_a_job_resources_change_shows_in_the_experiments_config() -> None:
    stored = experiment(config_json=json.dumps({"resources": {"weight": 1.0, "max_slots": 4}, "name": "x"}))
    change = ev.JobResourcesChanged(job_id="experiment/1", priority=10, max_slots=0)
    row = written(plan(change), experiments=[stored])["experiments"][1]
    assert json.loads(row["config_json"])["resources"] == {"weight": 1.0, "max_slots": None, "priority": 10}
    weight = written(plan(ev.JobResourcesChanged(job_id="experiment/1", weight=2.5)), experiments=[row])
    assert json.loads(weight["experiments"][1]["config_json"])["resources"]["weight"] == 2.5
    assert written(plan(ev.JobResourcesChanged(job_id="command/3", priority=1)), experiments=[stored]) == {}


def test_a_part_of_a_gang_exiting_changes_no_row() -> None:
    exited = ev.AllocationResourcesExited(allocation_id="1.1", agent_id="a", exit_code=1)
    assert written(plan(exited), allocations=[allocation()]) == {}


def test_unknown_and_stateless_events_change_nothing() -> None:
    kill = ev.AllocationKillRequested(allocation_id="1.1")
    batch = projection.plan_batch([envelope(kill), ev.Envelope(event_id="future")])
    assert batch.changes == [] and batch.keys() == {}


def test_the_rows_to_load_are_those_the_batch_changes() -> None:
    batch = plan(training(7, 1, 10), requested(3, 1), ev.TrialProgressReported(trial_id=3, progress=0.1))
    assert batch.keys() == {"allocations": ["3.1"], "trials": [3, 7]}


def test_watched_aggregates_are_those_whose_stop_or_length_changed() -> None:
    batch = [
        ev.AllocationStopRequested(allocation_id="1.1"),
        ev.AllocationExited(allocation_id="2.1"),
        ev.TrialLengthSet(trial_id=3),
        ev.TrialStopRequested(trial_id=4),
        training(5, 1, 10),
        ev.AllocationStarted(allocation_id="6.1"),
    ]
    polled = watched.polled([envelope(payload) for payload in batch])
    assert polled == {"allocation/1.1", "allocation/2.1", "trial/3", "trial/4"}
    assert watched.watched([envelope(payload) for payload in batch]) >= polled


def test_the_pages_a_batch_changes_are_those_that_show_what_it_names() -> None:
    def shown(*payloads: object) -> set[str]:
        return watched.shown([envelope(payload) for payload in payloads])

    experiment, trial = watched.shown_experiment, watched.shown_trial
    listed, cluster = watched.SHOWN_EXPERIMENTS, watched.SHOWN_CLUSTER
    assert shown(ev.ExperimentCreated(experiment_id=1)) == {experiment(1), listed, cluster}
    assert shown(ev.TrialCreated(trial_id=3, experiment_id=1)) == {experiment(1), trial(3), listed}
    assert shown(training(3, 1, 10)) == {trial(3)}  # no experiment id in this batch's event: its trial's page
    assert shown(ev.TrialValidationReported(trial_id=3, experiment_id=1)) == {experiment(1), trial(3), listed}
    assert shown(ev.AllocationStarted(allocation_id="3.2")) == {trial(3), cluster}
    assert shown(requested(3, 2)) == {trial(3), cluster}
    assert shown(ev.AgentRegistered(agent_id="a")) == {cluster}
    assert shown(ev.UserCreated(user_id=5), ev.ModelCreated(name="m")) == set()


def test_early_exits_keep_the_first_reason_and_metadata_is_replaced_whole() -> None:
    batch = plan(
        ev.TrialEarlyExitReported(trial_id=3, experiment_id=1, reason="INVALID_HP"),
        ev.TrialEarlyExitReported(trial_id=3, experiment_id=1, reason="USER_REQUESTED_STOP"),
        ev.TrialMetadataSet(trial_id=3, experiment_id=1, metadata_json='{"a":1}'),
    )
    row = written(batch, trials=[trial()])["trials"][3]
    assert (row["early_exit_reason"], row["metadata_json"]) == ("INVALID_HP", '{"a":1}')
    cleared = written(plan(ev.TrialMetadataSet(trial_id=3, experiment_id=1)), trials=[row])["trials"][3]
    assert cleared["metadata_json"] == "{}"


def test_every_table_is_written_whole_in_one_statement() -> None:
    statement = projection.UPSERTS["allocations"]
    assert statement.startswith("INSERT INTO read_model.allocations (")
    assert '"placements"::jsonb' in statement and 'ON CONFLICT ("allocation_id")' in statement
    assert projection.row_columns("agents", [agent()]) == [
        ["a"],
        ["h1"],
        ["[]"],
        [1],
        [""],
        [""],
        ["process"],
        ["ENABLED"],
        ["reg-1"],
        [False],
        ["{}"],
    ]
