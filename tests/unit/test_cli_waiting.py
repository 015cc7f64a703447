"""The CLI's decisions about waiting out a restarting master or a part of the
cluster that is down (determined/cli/_waiting.py, _cluster_status.py): which
failures, which calls, for how long, and what it says."""

import itertools
from typing import Any

import pytest

from determined.cli import _cluster_status as status
from determined.cli import _waiting as waiting
from determined.proto import api_pb2

# Every write of the API that a repeat could do twice: not repeated after it may have
# reached the master. A new RPC must be placed on purpose (here, or in _waiting's sets).
NOT_REPEATED = {
    "CreateExperiment",  # without a request id (with one: repeated, see below)
    "LaunchTask",  # the same
    "ReportMetrics",
    "StartUnmanagedTrial",  # core_v2's calls, never the CLI's
    "ReportUnmanagedTrial",
    "ReportProgress",
    "ReportCheckpoint",
    "ReportStatus",
    "WatchAllocation",
    "AcknowledgeStop",
    "ReportEarlyExit",
    "SetTrialMetadata",
    "UpdateJob",
    "DeleteCheckpoints",
    "SetGcPolicy",
    "DeleteExperiment",
    "ContinueExperiment",
    "CreateModel",
    "RegisterModelVersion",
    "CreateUser",
    "UpdateUser",
    "SetUserPassword",
}


def rpcs() -> list[str]:
    return [method.name for method in api_pb2.DESCRIPTOR.services_by_name["Determined"].methods]


def test_every_rpc_is_placed_on_purpose() -> None:
    assert {rpc for rpc in rpcs() if not waiting.safe_to_repeat(rpc)} == NOT_REPEATED


@pytest.mark.parametrize(
    "rpc",
    [
        "GetExperiments",
        "GetTrial",
        "TrialLogs",
        "TaskLogs",
        "DownloadCheckpointFile",
        "PreviewGc",
        "Login",
        "UploadContext",
        "KillExperiment",
        "PauseExperiment",
        "DisableAgent",
        "KillTask",
    ],
)
def test_reads_and_writes_a_repeat_leaves_as_one_are_repeated(rpc: str) -> None:
    assert waiting.safe_to_repeat(rpc)


def test_an_experiment_is_created_again_only_under_its_request_id() -> None:
    with_id = api_pb2.CreateExperimentRequest(config_yaml="x", request_id="abc")
    assert waiting.safe_to_repeat(waiting.rpc_name(with_id), with_id)
    without = api_pb2.CreateExperimentRequest(config_yaml="x")
    assert not waiting.safe_to_repeat(waiting.rpc_name(without), without)


def test_a_task_is_launched_again_only_under_its_request_id() -> None:
    with_id = api_pb2.LaunchTaskRequest(task_type="COMMAND", request_id="abc")
    assert waiting.safe_to_repeat(waiting.rpc_name(with_id), with_id)
    without = api_pb2.LaunchTaskRequest(task_type="COMMAND")
    assert not waiting.safe_to_repeat(waiting.rpc_name(without), without)


def test_the_rpc_is_named_by_its_request() -> None:
    assert waiting.rpc_name(api_pb2.GetExperimentsRequest()) == "GetExperiments"
    assert waiting.rpc_name(api_pb2.LoginRequest()) == "Login"


def test_a_refused_connection_never_sent_the_call() -> None:
    assert waiting.never_sent(
        "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1: "
        "Failed to connect to remote host: Connection refused"
    )
    assert not waiting.never_sent("Socket closed")
    assert not waiting.never_sent("the event log (nats-server) is unavailable")


def test_the_part_that_is_down_is_named_from_the_gateways_answer() -> None:
    assert waiting.part_down("localhost:8080", "the event log (nats-server) is unavailable") == (
        "the cluster's event log (nats-server) is down"
    )
    assert waiting.part_down("localhost:8080", "read models unavailable (PostgreSQL is down)") == (
        "the cluster's read models (PostgreSQL) are down"
    )
    assert (
        waiting.part_down("localhost:8080", "busy")
        == "the master at localhost:8080 answers that it is unavailable: busy"
    )
    assert (
        waiting.part_down("localhost:8080", "")
        == "the master at localhost:8080 answers that it is unavailable"
    )


@pytest.mark.parametrize(
    ("raw", "seconds"), [(None, 60.0), ("", 60.0), ("0", 0.0), ("2.5", 2.5), (" 600 ", 600.0)]
)
def test_the_wait_is_60_s_unless_set(raw: str | None, seconds: float) -> None:
    environ = {} if raw is None else {waiting.WAIT_ENV: raw}
    assert waiting.wait_budget(environ) == seconds


@pytest.mark.parametrize("raw", ["soon", "-1", "nan", "inf", "86401"])
def test_a_bad_wait_is_refused_naming_the_variable(raw: str) -> None:
    with pytest.raises(
        ValueError, match=f"DET_CLI_WAIT_S must be a number of seconds from 0 to 86400, not '{raw}'"
    ):
        waiting.wait_budget({waiting.WAIT_ENV: raw})


def test_the_pauses_double_up_to_two_seconds() -> None:
    assert list(itertools.islice(waiting.pauses(), 6)) == [0.25, 0.5, 1.0, 2.0, 2.0, 2.0]


@pytest.mark.parametrize(
    ("outage", "repeatable", "budget", "waited", "decision"),
    [
        ("", True, 60.0, 0.0, "fail"),  # nothing to wait for: no cluster runs there
        ("x is down", True, 0.0, 0.0, "fail"),  # DET_CLI_WAIT_S=0
        ("x is down", False, 60.0, 0.0, "not_repeatable"),
        ("x is down", True, 60.0, 0.0, "wait"),
        ("x is down", True, 60.0, 59.0, "wait"),
        ("x is down", True, 60.0, 59.5, "give_up"),
    ],
)
def test_what_to_do_after_a_failed_call(
    outage: str, repeatable: bool, budget: float, waited: float, decision: str
) -> None:
    assert waiting.decide(outage, repeatable, budget, waited, pause_s=1.0) == decision


def test_the_lines_say_what_is_waited_for_and_for_how_long() -> None:
    assert waiting.waiting_line("the cluster's event log (nats-server) is down", 60.0) == (
        "the cluster's event log (nats-server) is down; waiting up to 60 s"
    )
    assert waiting.gave_up("the event log (nats-server) is unavailable", 2.5) == (
        "the event log (nats-server) is unavailable; still so after waiting 2.5 s (set DET_CLI_WAIT_S to wait longer)"
    )
    assert waiting.restarting("localhost:8080", "the gateway is down (stopped)") == (
        "the master at localhost:8080 is not answering: the gateway is down (stopped)"
    )


def local(gateway_state: str = "stopped", **fields: Any) -> status.LocalCluster:
    parts = [{"name": "gateway", "state": gateway_state}]
    given: dict[str, Any] = {"master_port": 8080, "supervisor_alive": True, **fields}
    return status.LocalCluster({"supervisor_pid": 1, "parts": parts}, **given)


@pytest.mark.parametrize("state", ["running", "backoff", "starting", "stopped"])
def test_a_cluster_whose_supervisor_runs_is_expected_up(state: str) -> None:
    assert status.cluster_expected_up("localhost:8080", local(state))


def test_nothing_says_a_cluster_runs_there() -> None:
    expected_up = status.cluster_expected_up
    assert not expected_up("master.example:8080", None)  # not this machine's
    assert not expected_up("localhost:8080", status.LocalCluster(None, None, False))  # no cluster here
    assert not expected_up(
        "localhost:8080", local(supervisor_alive=False)
    )  # cluster-down, or its supervisor died
    assert not expected_up("localhost:9090", local())  # the data folder's cluster listens elsewhere


def test_plaintext_to_a_tls_gateway_is_not_waited_for() -> None:
    tls_only = local("running", tls_cert="/x/cert.pem")
    assert not status.cluster_expected_up("localhost:8080", tls_only, tls=False)
    assert status.cluster_expected_up("localhost:8080", tls_only, tls=True)
