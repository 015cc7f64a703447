"""The gateway's pure commands: config validation and the Appends of each
request."""

import json

import pytest

from determined.proto import api_pb2, events_pb2
from services.gateway import commands
from services.gateway.errors import FailedPreconditionError, InvalidArgumentError

CONFIG = "entrypoint: python3 train.py\nsearcher: {name: single, metric: loss}\n"


def validate(text: str) -> commands.ValidatedConfig:
    return commands.validate_config(text, checkpoint_host_path="/ckpt", experiment_seed=7, name="Experiment (x)")


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
    append = commands.experiment_created(
        4, "req", validate(CONFIG), owner="determined", context_hash="h", context_size=3, activate=True
    )
    assert (append.aggregate, append.msg_id, append.expected_version) == ("experiment/4", "create-req", 0)
    assert append.payload.experiment_id == 4 and append.payload.activate


def test_kill_of_an_ended_experiment_is_a_no_op() -> None:
    assert commands.kill_requested(1, "COMPLETED") is None
    append = commands.kill_requested(1, "PAUSED")
    assert append is not None and (append.aggregate, append.msg_id) == ("experiment/1", "kill-1")


def test_only_a_paused_experiment_is_activated_against_its_version() -> None:
    append = commands.activated(3, "PAUSED", version=17)
    assert append is not None
    assert (append.aggregate, append.msg_id, append.expected_version) == ("experiment/3", "activate-3-17", 17)
    assert append.payload.state == events_pb2.EXPERIMENT_STATE_ACTIVE
    assert commands.activated(3, "ACTIVE", version=17) is None
    for ended in ("COMPLETED", "CANCELED", "STOPPING_KILLED"):
        with pytest.raises(FailedPreconditionError, match=f"is {ended} and cannot be activated"):
            commands.activated(3, ended, version=17)


def test_metrics_message_id_names_the_batch() -> None:
    report = events_pb2.MetricReport(group="training", steps_completed=1, metrics_json='{"loss": 1}')
    request = api_pb2.ReportMetricsRequest(
        trial_id=3, trial_run_id=2, reporter_id="p1", batch_seq=9, reports=[report]
    )
    append = commands.metrics_reported(request, experiment_id=5)
    assert (append.aggregate, append.msg_id) == ("metrics/3", "metrics-3-2-p1-9")
    assert append.payload.experiment_id == 5 and list(append.payload.reports) == [report]


def test_non_finite_metrics_become_strings() -> None:
    report = events_pb2.MetricReport(metrics_json='{"loss": NaN, "x": [Infinity, -Infinity], "y": 1}')
    request = api_pb2.ReportMetricsRequest(trial_id=1, reports=[report])
    [stored] = commands.metrics_reported(request, experiment_id=1).payload.reports
    assert json.loads(stored.metrics_json) == {"loss": "NaN", "x": ["Infinity", "-Infinity"], "y": 1}


@pytest.mark.parametrize("text", ["not json", "[1]"])
def test_metrics_must_be_a_json_object(text: str) -> None:
    request = api_pb2.ReportMetricsRequest(trial_id=1, reports=[events_pb2.MetricReport(metrics_json=text)])
    with pytest.raises(InvalidArgumentError):
        commands.metrics_reported(request, experiment_id=1)


def test_progress_is_a_fraction() -> None:
    with pytest.raises(InvalidArgumentError):
        commands.progress_reported(api_pb2.ReportProgressRequest(trial_id=1, progress=1.5), experiment_id=1)
    append = commands.progress_reported(api_pb2.ReportProgressRequest(trial_id=1, progress=0.5), experiment_id=2)
    assert append.aggregate == "trial/1" and append.payload.experiment_id == 2


def test_checkpoint_is_keyed_by_uuid() -> None:
    request = api_pb2.ReportCheckpointRequest(uuid="u1", trial_id=1, resources={"a": 1})
    append = commands.checkpoint_reported(request, experiment_id=2, reported_at_ns=5)
    assert (append.aggregate, append.msg_id) == ("checkpoint/u1", "checkpoint-u1")
    assert append.payload.reported_at_ns == 5 and dict(append.payload.resources) == {"a": 1}
    with pytest.raises(InvalidArgumentError):
        commands.checkpoint_reported(api_pb2.ReportCheckpointRequest(trial_id=1), 2, 5)


def test_contexts_over_95_mib_are_refused() -> None:
    commands.check_context_size(commands.MAX_CONTEXT_BYTES)
    with pytest.raises(InvalidArgumentError, match="95 MiB"):
        commands.check_context_size(commands.MAX_CONTEXT_BYTES + 1)
