"""No traceback reaches a `det` user: bad ids are refused at parse time, a
closed pipe ends the command quietly, Ctrl-C exits 130, anything unexpected
is one line naming the file with the details; and when the master does not
answer, the CLI says which part is down, and waits it out for a while when
waiting can help and the call is safe to repeat (determined/cli/_waiting.py)."""

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from support.core_gateway import serving

from determined.cli import __main__ as cli
from determined.cli import _experiment_edit
from determined.cli.__main__ import build_parser, main
from determined.cli._client import CliError
from determined.proto import api_pb2, api_pb2_grpc, events_pb2

LINES = 20_000


class CliGateway(api_pb2_grpc.DeterminedServicer):
    """Streams many log lines; answers GetExperiments and CreateModel as a gateway whose
    NATS is down, and GetAgents so for its first two calls."""

    def __init__(self) -> None:
        self.agent_calls = 0

    def TrialLogs(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        for start in range(0, LINES, 500):
            lines = [
                events_pb2.LogLine(timestamp_ns=10**18 + i, log=f"line {i}")
                for i in range(start, start + 500)
            ]
            yield api_pb2.TrialLogsResponse(trial_id=request.trial_id, allocation_id="1.1", lines=lines)

    def GetExperiments(self, request: Any, context: grpc.ServicerContext) -> Any:
        context.abort(grpc.StatusCode.UNAVAILABLE, "the event log (nats-server) is unavailable")

    def CreateModel(self, request: Any, context: grpc.ServicerContext) -> Any:
        context.abort(grpc.StatusCode.UNAVAILABLE, "the event log (nats-server) is unavailable")

    def GetAgents(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.agent_calls += 1
        if self.agent_calls <= 2:
            context.abort(grpc.StatusCode.UNAVAILABLE, "read models unavailable (PostgreSQL is down)")
        return api_pb2.GetAgentsResponse()


@pytest.fixture
def master() -> Iterator[str]:
    with serving(CliGateway()) as address:
        yield address


def det_process(*argv: str, wait_s: str = "0", **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """`det argv` waiting out outages for `wait_s` (DET_CLI_WAIT_S)."""
    env = dict(kwargs.pop("env", os.environ), DET_CLI_WAIT_S=wait_s)
    return subprocess.run(
        [sys.executable, "-m", "determined.cli", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
        **kwargs,
    )


@pytest.mark.parametrize("text", ["99999999999999999999", "9223372036854775808", "0", "-3", "abc", "1.5"])
def test_ids_are_checked_at_parse_time_naming_the_argument(
    text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as raised:
        build_parser().parse_args(["e", "kill", text])
    assert raised.value.code == 2
    error = capsys.readouterr().err
    assert f"argument experiment_id: {text!r}" in error or f"argument experiment_id: {text} is not" in error
    assert "Traceback" not in error


def test_the_largest_id_is_accepted() -> None:
    assert build_parser().parse_args(["t", "logs", "9223372036854775807"]).trial_id == 2**63 - 1
    assert build_parser().parse_args(["e", "describe", " 12 "]).experiment_ids == [12]


def test_a_huge_id_from_the_shell_prints_one_line_and_no_traceback() -> None:
    result = det_process("trial", "describe", "99999999999999999999")
    assert result.returncode == 2
    assert "argument trial_id: 99999999999999999999 is not a trial id: ids go from 1 to" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_closed_pipe_ends_the_command_quietly(master: str) -> None:
    """`det trial logs 1 | head -1` with far more output than a pipe holds."""
    result = subprocess.run(
        f"{sys.executable} -m determined.cli -m {master} trial logs 1 | head -1",
        shell=True,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.stdout.endswith("|| line 0\n")
    assert result.stderr == ""


def test_all_lines_arrive_when_the_reader_reads_them(master: str) -> None:
    result = det_process("-m", master, "trial", "logs", "1")
    assert result.returncode == 0 and result.stderr == ""
    lines = result.stdout.splitlines()
    assert len(lines) == LINES
    assert lines[1] == "[2001-09-09T01:46:40.000000Z] 1.1      || line 1"


def test_an_unavailable_answer_from_the_gateway_is_shown_as_it_is(master: str) -> None:
    result = det_process("-m", master, "experiment", "list")
    assert (result.returncode, result.stderr) == (1, "the event log (nats-server) is unavailable\n")


def test_an_outage_is_waited_out_for_a_bounded_time_then_said(master: str) -> None:
    result = det_process("-m", master, "experiment", "list", wait_s="0.5")
    assert (result.returncode, result.stderr) == (
        1,
        (
            "the cluster's event log (nats-server) is down; waiting up to 0.5 s\n"
            "the event log (nats-server) is unavailable; still so after waiting 0.5 s (set DET_CLI_WAIT_S to wait longer)\n"
        ),
    )


def test_a_read_is_answered_once_the_part_is_back(master: str) -> None:
    result = det_process("-m", master, "agent", "list", wait_s="60")
    assert result.returncode == 0, result.stderr
    assert result.stderr == "the cluster's read models (PostgreSQL) are down; waiting up to 60 s\n"


def test_a_write_that_is_not_safe_to_repeat_is_not_repeated(master: str) -> None:
    result = det_process("-m", master, "model", "create", "mnist", wait_s="60")
    assert (result.returncode, result.stderr) == (
        1,
        (
            "the event log (nats-server) is unavailable; this request is not sent again by itself, "
            "as it may have been carried out: check, then retry\n"
        ),
    )


def test_a_bad_wait_setting_is_named(master: str) -> None:
    result = det_process("-m", master, "experiment", "list", wait_s="soon")
    assert (result.returncode, result.stderr) == (
        1,
        "DET_CLI_WAIT_S must be a number of seconds from 0 to 86400, not 'soon'\n",
    )


def run_main(monkeypatch: pytest.MonkeyPatch, failure: BaseException) -> int:
    def run(_args: Any) -> int:
        raise failure

    monkeypatch.setattr(_experiment_edit, "list_experiments", run)
    parser = build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda _argv: parser)
    parser.set_defaults(run=run)
    return main(["e"])


def test_ctrl_c_exits_130_quietly(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_main(monkeypatch, KeyboardInterrupt()) == 130
    assert capsys.readouterr().err == ""


def test_errors_are_one_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_main(monkeypatch, CliError("experiment 9 not found")) == 1
    assert capsys.readouterr().err == "experiment 9 not found\n"
    assert run_main(monkeypatch, PermissionError(13, "Permission denied", "/x/const.yaml")) == 1
    assert capsys.readouterr().err == "det: Permission denied: /x/const.yaml\n"


def test_an_unexpected_error_is_one_line_naming_where_the_details_are(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    assert run_main(monkeypatch, ZeroDivisionError("division by zero\nsecond line")) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("det: unexpected error: ZeroDivisionError: division by zero (details in ")
    [details] = tmp_path.glob("det-error-*.log")
    assert line.endswith(f"{details})") and "Traceback" in details.read_text()


def cluster_files(data_dir: Path, port: int, gateway: dict[str, Any], supervisor_pid: int) -> None:
    run = data_dir / "run"
    run.mkdir(parents=True)
    (run / "cluster.json").write_text(json.dumps({"master_port": port, "nats_port": 1, "postgres_port": 2}))
    parts = [gateway, {"name": "nats-server", "state": "running", "pid": 5, "restarts": 0, "last_error": ""}]
    (run / "status.json").write_text(
        json.dumps({"supervisor_pid": supervisor_pid, "updated_at": 0.0, "parts": parts})
    )


def test_a_down_gateway_is_named_from_the_supervisors_status_file(tmp_path: Path) -> None:
    from deploy.local.servers import free_port

    port = free_port()
    gateway = {
        "name": "gateway",
        "state": "backoff",
        "pid": 0,
        "restarts": 3,
        "last_error": "exited with code 1\nTraceback ...\nKeyError: 'x'",
    }
    cluster_files(tmp_path, port, gateway, supervisor_pid=os.getpid())
    result = det_process(
        "-m", f"localhost:{port}", "e", "list", env=dict(os.environ, DET_DATA_DIR=str(tmp_path))
    )
    assert result.returncode == 1
    assert result.stderr == (
        f"could not reach the master at localhost:{port}: the gateway is down (restarting: 3 restarts, "
        "last error: exited with code 1 ... KeyError: 'x')\n"
    )


def test_a_restarting_gateway_is_waited_for_then_given_up_in_a_sentence(tmp_path: Path) -> None:
    from deploy.local.servers import free_port

    port = free_port()
    cluster_files(tmp_path, port, {"name": "gateway", "state": "stopped"}, supervisor_pid=os.getpid())
    env = dict(os.environ, DET_DATA_DIR=str(tmp_path))
    result = det_process("-m", f"localhost:{port}", "e", "kill", "3", env=env, wait_s="0.5")
    assert result.returncode == 1
    assert result.stderr == (
        f"the master at localhost:{port} is not answering: the gateway is down (stopped); waiting up to 0.5 s\n"
        f"could not reach the master at localhost:{port}: the gateway is down (stopped); "
        "still so after waiting 0.5 s (set DET_CLI_WAIT_S to wait longer)\n"
    )


def test_a_cluster_in_another_data_folder_is_found_by_its_running_supervisor(tmp_path: Path) -> None:
    """cluster-up --data-dir elsewhere, and DET_DATA_DIR not set to it."""
    from deploy.local.servers import free_port

    port = free_port()
    data_dir = tmp_path / "elsewhere"
    # A process whose command line reads as a supervisor's of `data_dir`.
    supervisor = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time; time.sleep(120)",
            "deploy.local.supervisor",
            "--data-dir",
            str(data_dir),
        ]
    )
    try:
        cluster_files(data_dir, port, {"name": "gateway", "state": "stopped"}, supervisor_pid=supervisor.pid)
        env = dict(os.environ, DET_DATA_DIR=str(tmp_path / "default"))
        result = det_process("-m", f"localhost:{port}", "e", "list", env=env)
    finally:
        supervisor.kill()
        supervisor.wait()
    assert result.stderr == f"could not reach the master at localhost:{port}: the gateway is down (stopped)\n"


def test_no_running_cluster_is_said_so(tmp_path: Path) -> None:
    from deploy.local.servers import free_port

    port = free_port()
    env = dict(os.environ, DET_DATA_DIR=str(tmp_path))
    result = det_process("-m", f"localhost:{port}", "e", "list", env=env, wait_s="60")
    assert result.stderr == (
        f"could not reach the master at localhost:{port}: no cluster is running "
        "(start one with: det deploy local cluster-up)\n"
    )
