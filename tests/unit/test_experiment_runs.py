"""det experiment cancel | continue | wait | logs: the gateway's pure rules
(run_commands.py), the rows they leave (the experiments' and trials'
projection), the REST body, and the CLI against a gateway that records the
requests."""

import argparse
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from support.core_gateway import serving

from determined.cli.__main__ import build_parser, main
from determined.proto import api_pb2, api_pb2_grpc, events_pb2
from services.common.envelope import Append, wrap
from services.gateway import projection
from services.gateway.errors import FailedPreconditionError, InvalidArgumentError
from services.gateway.features.commands import Unchanged
from services.gateway.features.experiments import run_commands
from services.gateway.features.experiments.projection import experiment_row
from services.gateway.features.trials.projection import trial_row
from services.gateway.http.experiment_runs import continue_request

SINGLE = {"name": "single", "metric": "loss", "max_length": {"batches": 100}}


# -- cancel -------------------------------------------------------------------------------


@pytest.mark.parametrize("state", ["ACTIVE", "PAUSED"])
def test_a_cancel_is_recorded_for_a_live_experiment(state: str) -> None:
    append = run_commands.cancel_requested(3, state, 17)
    assert isinstance(append, Append)
    assert isinstance(append.payload, events_pb2.ExperimentCancelRequested)
    assert (append.aggregate, append.msg_id, append.payload.experiment_id) == (
        "experiment/3",
        "cancel-3-17",
        3,
    )


@pytest.mark.parametrize(
    "state",
    [
        "STOPPING_CANCELED",
        "STOPPING_KILLED",
        "STOPPING_COMPLETED",
        "STOPPING_ERROR",
        "COMPLETED",
        "CANCELED",
        "ERROR",
        "DELETING",
        "DELETE_FAILED",
        "DELETED",
    ],
)
def test_a_cancel_of_a_stopping_or_ended_experiment_changes_nothing(state: str) -> None:
    assert run_commands.cancel_requested(3, state, 17) == Unchanged(
        f"Experiment 3 is already {state}: nothing to cancel"
    )


# -- continue -----------------------------------------------------------------------------


def experiment(state: str = "COMPLETED", unmanaged: bool = False, **searcher: Any) -> api_pb2.Experiment:
    config = {"searcher": {**SINGLE, **searcher}, "entrypoint": "python3 train.py", "max_restarts": 5}
    return api_pb2.Experiment(id=3, state=state, config_json=json.dumps(config), unmanaged=unmanaged)


def test_the_overrides_are_merged_over_the_experiments_config() -> None:
    override = run_commands.override_config("searcher:\n  max_length:\n    batches: 300\nmax_restarts: 0\n")
    merged = json.loads(run_commands.continued_config(experiment(), override))
    assert merged["searcher"] == {**SINGLE, "max_length": {"batches": 300}}
    assert (merged["max_restarts"], merged["entrypoint"]) == (0, "python3 train.py")
    assert json.loads(run_commands.continued_config(experiment(), run_commands.override_config(""))) == (
        json.loads(experiment().config_json)
    )


@pytest.mark.parametrize("state", ["ACTIVE", "PAUSED", "STOPPING_CANCELED", "DELETING"])
def test_only_an_ended_experiment_is_continued(state: str) -> None:
    with pytest.raises(FailedPreconditionError, match=f"experiment 3 is {state}: only an ended experiment"):
        run_commands.continued_config(experiment(state), {})


def test_only_a_single_searcher_managed_experiment_is_continued() -> None:
    with pytest.raises(InvalidArgumentError, match="uses the 'random' searcher: only a single-searcher"):
        run_commands.continued_config(experiment(name="random", max_trials=2), {})
    with pytest.raises(InvalidArgumentError, match="must keep the single searcher, not 'grid'"):
        run_commands.continued_config(experiment(), {"searcher": {"name": "grid"}})
    with pytest.raises(FailedPreconditionError, match="is a detached run"):
        run_commands.continued_config(experiment(unmanaged=True), {})


def test_an_archived_experiment_is_not_continued() -> None:
    archived = experiment()
    archived.archived = True
    with pytest.raises(
        FailedPreconditionError, match=r"experiment 3 is archived: unarchive it \(det experiment"
    ):
        run_commands.continued_config(archived, {})


@pytest.mark.parametrize(
    ("text", "problem"),
    [("[1, 2]", "must be a mapping"), ("a: [", "invalid YAML"), ("x" * 2_000_000, "at most 1.0 MiB")],
)
def test_bad_overrides_are_refused(text: str, problem: str) -> None:
    with pytest.raises(InvalidArgumentError, match=problem):
        run_commands.override_config(text)


def test_a_continue_is_decided_against_the_experiments_version() -> None:
    append = run_commands.experiment_continued(3, '{"a": 1}', 40)
    assert (append.aggregate, append.msg_id, append.expected_version) == ("experiment/3", "continue-3-40", 40)
    assert append.payload == events_pb2.ExperimentContinued(experiment_id=3, config_json='{"a": 1}')


def test_the_rest_body_is_determineds() -> None:
    request = continue_request({"id": 3, "overrideConfig": "max_restarts: 0"})
    assert (request.experiment_id, request.override_config_yaml) == (3, "max_restarts: 0")
    assert continue_request({"id": 3}).override_config_yaml == ""
    for bad in ({}, {"id": "3"}, {"id": 0}, {"id": True}, {"id": 2**63}):
        with pytest.raises(InvalidArgumentError, match="id must be an experiment id"):
            continue_request(bad)
    with pytest.raises(InvalidArgumentError, match="overrideConfig must be a string"):
        continue_request({"id": 3, "overrideConfig": {"a": 1}})


# -- the rows -----------------------------------------------------------------------------


def rows(payload: Any, **stored: list[dict[str, Any]]) -> dict[Any, dict[str, Any]]:
    """The rows one event writes back, by key, given the stored rows of one table."""
    envelope = wrap(Append("x/1", payload, "m"), actor="test", occurred_at_ns=100)
    [(table, table_rows)] = stored.items()
    written = projection.plan_batch([envelope]).rows({table: {row["id"]: row for row in table_rows}})
    return {row["id"]: row for row in written.get(table, [])}


def experiment_in(state: str, **changes: Any) -> dict[str, Any]:
    created = events_pb2.ExperimentCreated(experiment_id=1, config_json=json.dumps({"searcher": SINGLE}))
    return {**experiment_row(created, 1), "state": state, **changes}


def test_a_cancel_shows_stopping_canceled_unless_stopping_harder_or_ended() -> None:
    cancel = events_pb2.ExperimentCancelRequested(experiment_id=1)
    for state in ("ACTIVE", "PAUSED"):
        assert rows(cancel, experiments=[experiment_in(state)])[1]["state"] == "STOPPING_CANCELED"
    for state in ("STOPPING_KILLED", "COMPLETED", "CANCELED", "DELETED"):
        assert rows(cancel, experiments=[experiment_in(state)]) == {}


def test_a_continued_experiment_is_active_again_under_its_new_config() -> None:
    config = {"searcher": {**SINGLE, "metric": "accuracy", "smaller_is_better": False}}
    continued = events_pb2.ExperimentContinued(experiment_id=1, config_json=json.dumps(config))
    ended = experiment_in("COMPLETED", ended_at_ns=50, end_reason="the search is done", progress=1.0)
    row = rows(continued, experiments=[ended])[1]
    assert (row["state"], row["ended_at_ns"], row["end_reason"], row["progress"]) == ("ACTIVE", None, "", 0.0)
    assert (row["searcher_metric"], row["smaller_is_better"]) == ("accuracy", False)
    assert json.loads(row["config_json"]) == config
    assert rows(continued, experiments=[experiment_in("ACTIVE")]) == {}


def test_a_reopened_trial_is_active_again() -> None:
    created = events_pb2.TrialCreated(trial_id=1, experiment_id=1)
    ended = {
        **trial_row(created, 1),
        "state": "COMPLETED",
        "ended_at_ns": 9,
        "end_reason": "done",
        "progress": 1.0,
        "runs": 3,
        "kill_requested": True,
    }
    reopened = events_pb2.TrialReopened(trial_id=1, experiment_id=1, length=0, reason="continued")
    row = rows(reopened, trials=[ended])[1]
    assert (row["state"], row["ended_at_ns"], row["end_reason"], row["progress"]) == ("ACTIVE", None, "", 1.0)
    # Killable again, and its restarts count from 0 (only runs after its 3 do).
    assert (row["kill_requested"], row["runs"], row["runs_before_continue"]) == (False, 3, 3)


# -- the CLI ------------------------------------------------------------------------------


class RecordingGateway(api_pb2_grpc.DeterminedServicer):
    """Answers GetExperiment with `states`, one per call (the last one again and
    again), and with `experiment_trials`' lists of trials, then `trials`."""

    def __init__(self) -> None:
        self.requests: list[Any] = []
        self.states = ["COMPLETED"]
        self.trials: list[api_pb2.Trial] = []
        self.experiment_trials: list[list[api_pb2.Trial]] = []

    def CancelExperiment(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.requests.append(request)
        return api_pb2.CancelExperimentResponse()

    def ContinueExperiment(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.requests.append(request)
        return api_pb2.ContinueExperimentResponse(experiment=api_pb2.Experiment(id=request.experiment_id))

    def GetExperiment(self, request: Any, context: grpc.ServicerContext) -> Any:
        state = self.states.pop(0) if len(self.states) > 1 else self.states[0]
        experiment = api_pb2.Experiment(id=request.experiment_id, state=state, end_reason="why")
        trials = self.experiment_trials.pop(0) if self.experiment_trials else self.trials
        return api_pb2.GetExperimentResponse(experiment=experiment, trials=trials)

    def GetTrial(self, request: Any, context: grpc.ServicerContext) -> Any:
        return api_pb2.GetTrialResponse(trial=api_pb2.Trial(id=request.trial_id, state="COMPLETED"))

    def GetExperimentTrials(self, request: Any, context: grpc.ServicerContext) -> Any:
        return api_pb2.GetExperimentTrialsResponse(trials=self.trials)

    def TrialLogs(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        self.requests.append(request)
        line = events_pb2.LogLine(timestamp_ns=10**18, log=f"trial {request.trial_id} says hi")
        yield api_pb2.TrialLogsResponse(allocation_id=f"{request.trial_id}.1", lines=[line])


@pytest.fixture
def gateway() -> Iterator[tuple[str, RecordingGateway]]:
    servicer = RecordingGateway()
    with serving(servicer) as address:
        yield address, servicer


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


def test_the_verbs_take_determineds_flags() -> None:
    assert parse("e", "wait", "3").polling_interval == 5.0
    assert parse("e", "wait", "3", "--polling-interval", "0.5").polling_interval == 0.5
    args = parse("e", "continue", "3", "--config", "max_restarts=0", "-f")
    assert (args.experiment_id, args.config, args.follow, args.config_file) == (
        3,
        ["max_restarts=0"],
        True,
        None,
    )
    args = parse("e", "logs", "3", "--tail", "5", "--level", "ERROR", "--json")
    assert (args.tail, args.json) == (5, True)


@pytest.mark.parametrize("argv", [("e", "wait", "3", "--polling-interval", "0"), ("e", "cancel", "0")])
def test_bad_arguments_are_refused_before_anything_is_sent(argv: tuple[str, ...]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse(*argv)
    assert exited.value.code == 2


@pytest.mark.parametrize(("state", "code"), [("COMPLETED", 0), ("CANCELED", 1), ("ERROR", 1), ("DELETED", 1)])
def test_wait_exits_0_only_when_the_experiment_completed(
    gateway: tuple[str, RecordingGateway], capsys: pytest.CaptureFixture[str], state: str, code: int
) -> None:
    address, servicer = gateway
    servicer.states = ["ACTIVE", "STOPPING_COMPLETED", state]
    assert main(["-m", address, "e", "wait", "3", "--polling-interval", "0.01"]) == code
    assert capsys.readouterr().out == f"Experiment 3 ended {state}: why\n"


def test_wait_refuses_a_paused_experiment(
    gateway: tuple[str, RecordingGateway], capsys: pytest.CaptureFixture[str]
) -> None:
    address, servicer = gateway
    servicer.states = ["PAUSED"]
    assert main(["-m", address, "e", "wait", "3"]) == 1
    assert "experiment 3 is PAUSED: it would never end" in capsys.readouterr().err


def test_cancel_and_continue_send_the_request(
    gateway: tuple[str, RecordingGateway], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    address, servicer = gateway
    overrides = tmp_path / "more.yaml"
    overrides.write_text("searcher:\n  max_length:\n    batches: 300\nmax_restarts: 2\n")
    assert main(["-m", address, "e", "cancel", "3"]) == 0
    argv = [
        "-m",
        address,
        "e",
        "continue",
        "3",
        "--config-file",
        str(overrides),
        "--config",
        "max_restarts=0",
    ]
    assert main(argv) == 0
    assert main(["-m", address, "e", "continue", "4"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "Canceled experiment 3",
        "Continued experiment 3",
        "Continued experiment 4",
    ]
    cancel, continued, plain = servicer.requests
    assert cancel == api_pb2.CancelExperimentRequest(experiment_id=3)
    assert continued.experiment_id == 3
    assert yaml.safe_load(continued.override_config_yaml) == {
        "searcher": {"max_length": {"batches": 300}},
        "max_restarts": 0,
    }
    assert plain == api_pb2.ContinueExperimentRequest(experiment_id=4)


def test_continue_follows_the_trial_once_it_trains_again(
    gateway: tuple[str, RecordingGateway], capsys: pytest.CaptureFixture[str]
) -> None:
    address, servicer = gateway
    servicer.states = ["ACTIVE"]
    ended, reopened = api_pb2.Trial(id=8, state="COMPLETED"), api_pb2.Trial(id=8, state="ACTIVE")
    servicer.experiment_trials, servicer.trials = [[ended], [ended]], [reopened]
    assert main(["-m", address, "e", "continue", "3", "-f"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "Continued experiment 3",
        "Following trial with ID 8",
        "[2001-09-09T01:46:40.000000Z] 8.1      || trial 8 says hi",
        "Trial log stream ended. To reopen log stream, run: det trial logs -f 8",
    ]
    assert servicer.requests[-1] == api_pb2.TrialLogsRequest(trial_id=8, follow=True)


def test_continue_refuses_a_bad_config_file_before_anything_is_sent(
    gateway: tuple[str, RecordingGateway], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    address, servicer = gateway
    listed = tmp_path / "list.yaml"
    listed.write_text("- 1\n")
    assert main(["-m", address, "e", "continue", "3", "--config-file", str(listed)]) == 1
    assert main(["-m", address, "e", "continue", "3", "--config-file", str(tmp_path / "none.yaml")]) == 1
    err = capsys.readouterr().err
    assert "must hold a mapping of config fields" in err and "does not exist" in err
    assert servicer.requests == []


def test_logs_show_the_first_trials_lines_with_the_trial_logs_flags(
    gateway: tuple[str, RecordingGateway], capsys: pytest.CaptureFixture[str]
) -> None:
    address, servicer = gateway
    assert main(["-m", address, "e", "logs", "3"]) == 1
    assert "experiment 3 has no trials yet" in capsys.readouterr().err
    servicer.trials = [api_pb2.Trial(id=9), api_pb2.Trial(id=8)]
    assert main(["-m", address, "e", "logs", "3", "--tail", "5", "--level", "ERROR"]) == 0
    assert capsys.readouterr().out == "[2001-09-09T01:46:40.000000Z] 8.1      || trial 8 says hi\n"
    [request] = servicer.requests
    assert (request.trial_id, request.limit, request.tail, list(request.levels)) == (
        8,
        5,
        True,
        ["ERROR", "CRITICAL"],
    )
