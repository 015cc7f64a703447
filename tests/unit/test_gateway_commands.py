"""The gateway's pure commands: config validation and the Appends of each
request."""

import json
from typing import Any

import pytest

from determined.proto import api_pb2, events_pb2
from services.common.envelope import Append
from services.gateway.errors import FailedPreconditionError, InvalidArgumentError
from services.gateway.features.agents import commands as agent_commands
from services.gateway.features.checkpoints import commands as checkpoint_commands
from services.gateway.features.commands import Unchanged
from services.gateway.features.experiments import commands as experiment_commands
from services.gateway.features.jobs import commands as job_commands
from services.gateway.features.trials import commands as trial_commands
from services.gateway.features.trials.queries import AllocationView, TrialStatus

CONFIG = "entrypoint: python3 train.py\nsearcher: {name: single, metric: loss}\n"


def validate(text: str) -> experiment_commands.ValidatedConfig:
    return experiment_commands.validate_config(
        text, checkpoint_host_path="/ckpt", experiment_seed=7, name="Experiment (x)"
    )


def test_valid_config_is_fully_defaulted() -> None:
    config = validate(CONFIG)
    stored = json.loads(config.config_json)
    assert config.name == stored["name"] == "Experiment (x)"
    assert stored["entrypoint"] == "python3 train.py"


def test_invalid_config_lists_every_problem() -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        validate("entrypoint: x\nsearcher: {name: nope}\nmax_restarts: -1\n")
    lines = str(raised.value).splitlines()
    assert any(line.startswith("searcher.name") for line in lines)
    assert any(line.startswith("max_restarts") for line in lines)


def test_managed_experiments_need_an_entrypoint() -> None:
    with pytest.raises(InvalidArgumentError, match="entrypoint"):
        validate("searcher: {name: single, metric: loss}\n")


def test_created_event_expects_a_new_aggregate() -> None:
    append = experiment_commands.experiment_created(
        4, "req", validate(CONFIG), owner="determined", context_hash="h", context_size=3, activate=True
    )
    assert (append.aggregate, append.msg_id, append.expected_version) == ("experiment/4", "create-req", 0)
    assert append.payload.experiment_id == 4 and append.payload.activate


def appended(decision: Append | Unchanged) -> Append:
    assert isinstance(decision, Append), decision
    return decision


def test_a_kill_of_an_ended_or_killed_experiment_changes_nothing_and_says_so() -> None:
    for state in ("COMPLETED", "CANCELED", "ERROR", "STOPPING_KILLED"):
        assert experiment_commands.kill_requested(3, state, 9) == Unchanged(
            f"Experiment 3 is already {state}: nothing to kill"
        )
    for state in ("PAUSED", "ACTIVE", "STOPPING_COMPLETED"):
        append = appended(experiment_commands.kill_requested(1, state, 9))
        assert (append.aggregate, append.msg_id) == ("experiment/1", "kill-1-9")


def test_only_a_paused_experiment_is_activated_against_its_version() -> None:
    append = appended(experiment_commands.activated(3, "PAUSED", version=17))
    assert (append.aggregate, append.msg_id, append.expected_version) == ("experiment/3", "activate-3-17", 17)
    assert append.payload.state == events_pb2.EXPERIMENT_STATE_ACTIVE
    for there in ("ACTIVE", "COMPLETED", "CANCELED"):
        assert experiment_commands.activated(3, there, version=17) == Unchanged(
            f"Experiment 3 is already {there}: nothing to activate"
        )
    with pytest.raises(FailedPreconditionError, match="is STOPPING_KILLED and cannot be activated"):
        experiment_commands.activated(3, "STOPPING_KILLED", version=17)


def test_pause_is_decided_against_the_version_and_refused_once_stopping() -> None:
    append = appended(experiment_commands.paused(3, "ACTIVE", version=4))
    assert (append.aggregate, append.msg_id, append.expected_version) == ("experiment/3", "pause-3-4", 4)
    assert append.payload.state == events_pb2.EXPERIMENT_STATE_PAUSED
    assert append.payload.reason == "paused by a user"
    for there in ("PAUSED", "ERROR"):
        assert experiment_commands.paused(3, there, version=4) == Unchanged(
            f"Experiment 3 is already {there}: nothing to pause"
        )
    with pytest.raises(FailedPreconditionError, match="is STOPPING_CANCELED and cannot be paused"):
        experiment_commands.paused(3, "STOPPING_CANCELED", version=4)


def test_a_detached_run_is_neither_paused_nor_activated() -> None:
    experiment_commands.check_managed(3, False, "pause")
    for action in ("pause", "activate"):
        with pytest.raises(
            FailedPreconditionError, match=f"experiment 3 is a detached run: it cannot be {action}d"
        ):
            experiment_commands.check_managed(3, True, action)


def test_a_trial_is_killed_once_and_not_after_it_ended() -> None:
    append = appended(trial_commands.trial_kill_requested(7, TrialStatus(2, "ACTIVE", None, False), 40))
    assert (append.aggregate, append.msg_id) == ("trial/7", "trial-kill-7-40")
    assert (append.payload.trial_id, append.payload.experiment_id) == (7, 2)
    assert trial_commands.trial_kill_requested(7, TrialStatus(2, "CANCELED", None, True), 41) == Unchanged(
        "Trial 7 is already CANCELED: nothing to kill"
    )
    assert trial_commands.trial_kill_requested(7, TrialStatus(2, "ACTIVE", "a1", True), 41) == Unchanged(
        "Trial 7 is being killed already: nothing to kill"
    )


def test_the_kill_of_a_reopened_trial_is_not_taken_for_the_kill_before_it() -> None:
    """Continue reopens a killed trial (kill_requested false again): killing it again within
    JetStream's duplicate window must not reuse the first kill's message id."""
    first = appended(trial_commands.trial_kill_requested(7, TrialStatus(2, "ACTIVE", "a1", False), 40))
    again = appended(trial_commands.trial_kill_requested(7, TrialStatus(2, "ACTIVE", "a2", False), 55))
    assert first.msg_id != again.msg_id


def metric_request(*reports: events_pb2.MetricReport) -> api_pb2.ReportMetricsRequest:
    return api_pb2.ReportMetricsRequest(
        trial_id=3, trial_run_id=2, reporter_id="p1", batch_seq=9, reports=reports
    )


def test_metrics_message_id_names_the_batch() -> None:
    report = events_pb2.MetricReport(group="training", steps_completed=1, metrics_json='{"loss": 1}')
    [append] = trial_commands.metrics_reported(metric_request(report), experiment_id=5)
    assert (append.aggregate, append.msg_id) == ("metrics/3", "metrics-3-2-p1-9")
    assert append.payload.experiment_id == 5 and list(append.payload.reports) == [report]


def test_validations_are_appended_each_on_their_own_subject() -> None:
    train = events_pb2.MetricReport(group="training", steps_completed=10, metrics_json='{"loss": 1}')
    custom = events_pb2.MetricReport(group="inference", steps_completed=10, metrics_json='{"x": 1}')
    validation = events_pb2.MetricReport(
        group="validation", steps_completed=10, metrics_json='{"loss": NaN}', reported_at_ns=4
    )
    batch, first = trial_commands.metrics_reported(metric_request(train, validation, custom), experiment_id=5)
    assert list(batch.payload.reports) == [train, custom]
    assert (first.aggregate, first.msg_id) == ("validation/3", "validation-3-2-p1-9-1")
    assert isinstance(first.payload, events_pb2.TrialValidationReported)
    assert (first.payload.experiment_id, first.payload.trial_run_id, first.payload.steps_completed) == (
        5,
        2,
        10,
    )
    assert json.loads(first.payload.metrics_json) == {"loss": "NaN"} and first.payload.reported_at_ns == 4
    only = trial_commands.metrics_reported(metric_request(validation, validation), experiment_id=5)
    assert [append.msg_id for append in only] == ["validation-3-2-p1-9-0", "validation-3-2-p1-9-1"]


def test_non_finite_metrics_become_strings() -> None:
    report = events_pb2.MetricReport(metrics_json='{"loss": NaN, "x": [Infinity, -Infinity], "y": 1}')
    request = api_pb2.ReportMetricsRequest(trial_id=1, reports=[report])
    [append] = trial_commands.metrics_reported(request, experiment_id=1)
    [stored] = append.payload.reports
    assert json.loads(stored.metrics_json) == {"loss": "NaN", "x": ["Infinity", "-Infinity"], "y": 1}


@pytest.mark.parametrize("text", ["not json", "[1]"])
def test_metrics_must_be_a_json_object(text: str) -> None:
    request = api_pb2.ReportMetricsRequest(trial_id=1, reports=[events_pb2.MetricReport(metrics_json=text)])
    with pytest.raises(InvalidArgumentError):
        trial_commands.metrics_reported(request, experiment_id=1)


def test_progress_is_a_fraction() -> None:
    with pytest.raises(InvalidArgumentError):
        trial_commands.progress_reported(
            api_pb2.ReportProgressRequest(trial_id=1, progress=1.5), experiment_id=1
        )
    append = trial_commands.progress_reported(
        api_pb2.ReportProgressRequest(trial_id=1, progress=0.5, reporter_id="p1", seq=1), experiment_id=2
    )
    assert append.aggregate == "trial/1" and append.payload.experiment_id == 2


def test_progress_is_stored_once_per_numbered_report_not_once_per_value() -> None:
    def msg_id(seq: int, reporter_id: str = "p1") -> str:
        request = api_pb2.ReportProgressRequest(trial_id=4, progress=0.5, reporter_id=reporter_id, seq=seq)
        return trial_commands.progress_reported(request, experiment_id=2).msg_id

    assert msg_id(3) == msg_id(3) == "progress-4-p1-3"
    assert len({msg_id(3), msg_id(4), msg_id(3, "p2")}) == 3
    with pytest.raises(InvalidArgumentError, match="seq"):
        trial_commands.progress_reported(api_pb2.ReportProgressRequest(trial_id=4, progress=0.5), 2)


def test_a_status_is_stored_once_per_numbered_report() -> None:
    request = api_pb2.ReportStatusRequest(trial_id=4, status="evaluating", reporter_id="p1", seq=3)
    append = trial_commands.status_reported(request, experiment_id=2, allocation_id="4.2")
    assert (append.aggregate, append.msg_id) == ("trial/4", "status-4-4.2-p1-3")
    assert (append.payload.experiment_id, append.payload.status) == (2, "evaluating")
    with pytest.raises(InvalidArgumentError, match="seq"):
        trial_commands.status_reported(api_pb2.ReportStatusRequest(trial_id=4, status="x"), 2, "4.2")


def allocation(**changes: object) -> AllocationView:
    fields: dict[str, Any] = {
        "allocation_id": "12.1",
        "trial_id": 12,
        "experiment_id": 1,
        "current_allocation_id": "12.1",
        "exited": False,
        "canceled": False,
        "stop_requested": False,
        "stop_reason": None,
        "searcher_length": 0,
        "searcher_stop": None,
    }
    return AllocationView(**{**fields, **changes})


def test_only_the_trials_current_open_allocation_may_report() -> None:
    assert allocation().refusal() is None
    assert allocation(exited=True).refusal() == (
        "allocation 12.1 of trial 12 is closed (exited); reports from it are refused"
    )
    assert "closed (canceled)" in (allocation(canceled=True).refusal() or "")
    assert "no longer the trial's current allocation (12.2 is)" in (
        allocation(current_allocation_id="12.2").refusal() or ""
    )


def test_a_stop_is_acknowledged_only_when_one_was_requested() -> None:
    append = trial_commands.stop_acknowledged(allocation(stop_requested=True))
    assert (append.aggregate, append.msg_id) == ("allocation/12.1", "stop-ack-12.1")
    assert append.payload == events_pb2.AllocationStopAcknowledged(allocation_id="12.1", task_id="12")
    with pytest.raises(FailedPreconditionError, match="not asked to stop"):
        trial_commands.stop_acknowledged(allocation())


def test_checkpoint_is_keyed_by_uuid() -> None:
    request = api_pb2.ReportCheckpointRequest(uuid="u1", trial_id=1, resources={"a": 1})
    append = checkpoint_commands.checkpoint_reported(request, experiment_id=2, reported_at_ns=5)
    assert (append.aggregate, append.msg_id) == ("checkpoint/u1", "checkpoint-u1")
    assert append.payload.reported_at_ns == 5 and dict(append.payload.resources) == {"a": 1}
    with pytest.raises(InvalidArgumentError):
        checkpoint_commands.checkpoint_reported(api_pb2.ReportCheckpointRequest(trial_id=1), 2, 5)


def test_contexts_over_95_mib_are_refused() -> None:
    experiment_commands.check_context_size(experiment_commands.MAX_CONTEXT_BYTES)
    with pytest.raises(InvalidArgumentError, match="is 95.0 MiB packed; at most 95 MiB"):
        experiment_commands.check_context_size(experiment_commands.MAX_CONTEXT_BYTES + 1)
    with pytest.raises(InvalidArgumentError, match="is more than 95 MiB packed"):
        experiment_commands.check_context_size(experiment_commands.MAX_CONTEXT_BYTES + 1, complete=False)


def test_a_context_hash_is_a_sha256() -> None:
    digest = "ab" * 32
    assert experiment_commands.checked_context_hash(digest) == digest
    for bad in ("", "AB" * 32, "ab" * 31, "../" + "a" * 61):
        with pytest.raises(InvalidArgumentError, match="context_hash"):
            experiment_commands.checked_context_hash(bad)


def test_an_early_exit_is_reported_once_per_trial_with_a_known_reason() -> None:
    request = api_pb2.ReportEarlyExitRequest(trial_id=4, reason="INVALID_HP")
    append = trial_commands.early_exit_reported(request, experiment_id=2, reported=None)
    assert (append.aggregate, append.msg_id) == ("trial/4", "early-exit-4")
    assert append.payload == events_pb2.TrialEarlyExitReported(
        trial_id=4, experiment_id=2, reason="INVALID_HP"
    )
    stop = api_pb2.ReportEarlyExitRequest(trial_id=4, reason="USER_REQUESTED_STOP")
    assert trial_commands.early_exit_reported(stop, 2, None).msg_id == "early-exit-4"
    with pytest.raises(FailedPreconditionError, match=r"already reported \(INVALID_HP\)"):
        trial_commands.early_exit_reported(stop, 2, reported="INVALID_HP")
    for reason in ("", "EXITED_REASON_INVALID_HP", "ERRORED", "invalid_hp"):
        with pytest.raises(
            InvalidArgumentError, match="reason must be one of INVALID_HP, USER_REQUESTED_STOP"
        ):
            trial_commands.early_exit_reported(
                api_pb2.ReportEarlyExitRequest(trial_id=4, reason=reason), 2, None
            )


def metadata(text: str, *, version: int = 9, current: str | None = "{}") -> Append | None:
    request = api_pb2.SetTrialMetadataRequest(trial_id=4, metadata_json=text)
    return trial_commands.metadata_set(request, 2, version=version, current=current)


def test_metadata_is_stored_compact_and_keyed_by_the_trials_version_and_content() -> None:
    append = metadata('{"b": 1, "a": {"x": [1, 2.5]}}')
    assert append is not None
    assert append.payload == events_pb2.TrialMetadataSet(
        trial_id=4, experiment_id=2, metadata_json='{"b":1,"a":{"x":[1,2.5]}}'
    )
    assert append.aggregate == "trial/4" and append.msg_id.startswith("metadata-4-9-")
    # The same content at the same version is one message; at a later version (A, B, A) another.
    assert (again := metadata('{"b":1, "a": {"x": [1, 2.5]}}')) is not None and again.msg_id == append.msg_id
    assert (later := metadata('{"b": 1, "a": {"x": [1, 2.5]}}', version=12)) is not None
    assert later.msg_id != append.msg_id
    other = metadata('{"b": 2}')
    assert other is not None and other.msg_id != append.msg_id


def test_metadata_already_stored_is_not_set_again() -> None:
    assert metadata('{"b": 1,  "a": 2}', current='{"b":1,"a":2}') is None
    assert metadata('{"a": true}', current='{"a":1}') is not None


@pytest.mark.parametrize("text", ["[]", "1", "not json", '{"a": NaN}', '{"a": Infinity}', ""])
def test_metadata_must_be_a_json_object(text: str) -> None:
    with pytest.raises(InvalidArgumentError, match="metadata_json"):
        metadata(text)


def test_metadata_has_a_size_limit() -> None:
    with pytest.raises(InvalidArgumentError, match="at most"):
        metadata(json.dumps({"x": "y" * trial_commands.MAX_METADATA_BYTES}))


def test_an_upload_is_kept_only_when_its_last_request_names_what_arrived() -> None:
    digest = "ab" * 32
    experiment_commands.check_uploaded(digest, digest)
    with pytest.raises(InvalidArgumentError, match="cut short"):
        experiment_commands.check_uploaded("", digest)
    with pytest.raises(InvalidArgumentError, match="damaged"):
        experiment_commands.check_uploaded("cd" * 32, digest)


def test_an_agent_is_enabled_or_disabled_unless_it_is_so_already() -> None:
    enabled = agent_commands.agent_enabled("a1", "DRAINING", "ann", 7)
    assert isinstance(enabled, Append) and enabled.aggregate == "agent/a1" and enabled.expected_version == 7
    assert enabled.msg_id == "agent-enable-a1-7" and enabled.payload == events_pb2.AgentEnabled(
        agent_id="a1", owner="ann"
    )
    assert agent_commands.agent_enabled("a1", "ENABLED", "ann", 7) == Unchanged(
        "Agent a1 is already enabled: nothing to do"
    )
    drained = agent_commands.agent_disabled("a1", "DISABLED", True, "ann", 8)
    assert isinstance(drained, Append) and drained.payload == events_pb2.AgentDisabled(
        agent_id="a1", drain=True, owner="ann"
    )
    stopped = agent_commands.agent_disabled(
        "a1", "DRAINING", False, "ann", 9
    )  # its work is now asked to stop
    assert isinstance(stopped, Append) and not stopped.payload.drain
    assert agent_commands.agent_disabled("a1", "DISABLED", False, "ann", 9) == Unchanged(
        "Agent a1 is already disabled: nothing to do"
    )


@pytest.mark.parametrize(("job_id", "experiment_id"), [("experiment/7", 7), ("7", 7), (" 12 ", 12)])
def test_a_job_id_names_an_experiment(job_id: str, experiment_id: int) -> None:
    assert job_commands.checked_job_id(job_id) == experiment_id


@pytest.mark.parametrize("job_id", ["", "trial/7", "experiment/", "experiment/0", "x", "7/"])
def test_other_job_ids_are_refused(job_id: str) -> None:
    with pytest.raises(InvalidArgumentError, match="is not an experiment's job id"):
        job_commands.checked_job_id(job_id)


CURRENT = job_commands.JobResources(priority=42, weight=1.0, max_slots=0)


def test_a_job_change_records_only_what_differs() -> None:
    request = api_pb2.UpdateJobRequest(job_id="7", priority=42, weight=2.0, max_slots=0)
    append = job_commands.job_resources_changed(7, request, CURRENT, "ann", 5)
    assert isinstance(append, Append) and append.aggregate == "experiment/7" and append.expected_version == 5
    payload = append.payload
    assert (payload.job_id, payload.HasField("priority"), payload.weight, payload.HasField("max_slots")) == (
        "experiment/7",
        False,
        2.0,
        False,
    )
    assert append.msg_id.startswith("job-resources-7-5-")
    same = job_commands.job_resources_changed(7, api_pb2.UpdateJobRequest(priority=42), CURRENT, "ann", 5)
    assert same == Unchanged("Job experiment/7 has these values already: nothing to change")


@pytest.mark.parametrize(
    ("request_fields", "message"),
    [
        ({}, "set at least one of priority, weight and max_slots"),
        ({"priority": 0}, "priority must be from 1 to 99"),
        ({"priority": 100}, "priority must be from 1 to 99"),
        ({"weight": 0.0}, "weight must be a number above 0"),
        ({"weight": float("inf")}, "weight must be a number above 0"),
        ({"max_slots": -1}, "max_slots must be 0 (no cap) or more"),
    ],
)
def test_a_job_change_is_validated(request_fields: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message.replace("(", r"\(").replace(")", r"\)")):
        job_commands.job_resources_changed(
            7, api_pb2.UpdateJobRequest(job_id="7", **request_fields), CURRENT, "a", 1
        )


def test_a_jobs_resources_are_read_from_its_config() -> None:
    config = json.dumps({"resources": {"priority": 10, "weight": 0.5, "max_slots": None}})
    assert job_commands.job_resources(config, 42) == job_commands.JobResources(10, 0.5, 0)
    assert job_commands.job_resources("{}", 42) == CURRENT


def test_an_unknown_resource_pool_is_refused_naming_the_pools() -> None:
    experiment_commands.checked_resource_pool(
        json.dumps({"resources": {"resource_pool": "gpu"}}), ["default", "gpu"]
    )
    experiment_commands.checked_resource_pool(json.dumps({"resources": {}}), ["default"])
    with pytest.raises(
        InvalidArgumentError,
        match="'tpu' is not a resource pool of this cluster; the pools are: default, gpu",
    ):
        experiment_commands.checked_resource_pool(
            json.dumps({"resources": {"resource_pool": "tpu"}}), ["default", "gpu"]
        )
