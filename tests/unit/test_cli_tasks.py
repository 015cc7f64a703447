"""`det notebook | tensorboard | cmd | task`: their arguments checked at parse time, the
config they send, and what they send and print against a gateway that plays a task's
lifecycle and records the requests (the real gateway and agents: tests/e2e/test_tasks_cli.py)."""

import argparse
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import grpc
import pytest
import yaml
from support.core_gateway import serving

from determined.cli import _tasks
from determined.cli.__main__ import build_parser, main
from determined.cli._client import CliError
from determined.cli.command import exit_status
from determined.proto import api_pb2, api_pb2_grpc, events_pb2

NOTEBOOK_ID = "6f1c2e4a-0000-4000-8000-000000000001"
COMMAND_ID = "6f1c2e4a-0000-4000-8000-000000000002"
OTHERS_ID = "9a9a9a9a-0000-4000-8000-000000000003"


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["notebook", "kill", "xyz"], "'xyz' is not a task id (a UUID, or the start of one)"),
        (["cmd", "logs", "a" * 37], "is not a task id"),
        (["notebook", "set", "priority", "6f1c", "100"], "100 is not a priority"),
        (["tensorboard", "start", "0"], "0 is not an experiment id"),
        (["tensorboard", "start", "-t", "x"], "'x' is not a trial id"),
        (["notebook", "list", "-q", "--json"], "not allowed with argument"),
        (["job", "update", "task/6f1c", "--priority", "3"], "or task/<task id>"),
    ],
)
def test_bad_values_are_refused_at_parse_time(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        parse(*argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_the_command_line_is_everything_after_the_flags() -> None:
    run = parse("cmd", "run", "-d", "--config", "resources.slots=0", "echo hi; exit 3")
    assert (run.detach, run.config, run.entrypoint) == (True, ["resources.slots=0"], ["echo hi; exit 3"])
    assert parse("command", "run", "ls", "-d").entrypoint == ["ls", "-d"]
    start = parse("tensorboard", "start", "1", "2", "-t", "5", "6", "--no-browser")
    assert (start.experiment_ids, start.trial_ids, start.no_browser) == ([1, 2], [5, 6], True)
    assert parse("notebook", "logs", " 6F1C ").task_id == "6f1c"
    assert (
        parse("job", "update", f"task/{NOTEBOOK_ID.upper()}", "--priority", "3").job_id
        == f"task/{NOTEBOOK_ID}"
    )


def test_the_config_sent_is_the_file_with_overrides_and_volumes(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("description: mine\nresources:\n  slots: 2\n")
    assert _tasks.read_config(path, [], [], "NOTEBOOK")[0] == path.read_text()
    text, config = _tasks.read_config(None, [], [], "TENSORBOARD")
    assert (text, config.slots) == ("", 0)
    text, config = _tasks.read_config(
        path, ["resources.slots=0", "idle_timeout=30s"], ["/data:/mnt"], "NOTEBOOK"
    )
    assert yaml.safe_load(text) == {
        "description": "mine",
        "resources": {"slots": 0},
        "idle_timeout": "30s",
        "bind_mounts": [{"host_path": "/data", "container_path": "/mnt"}],
    }
    assert (config.slots, config.idle_timeout_s) == (0, 30)


@pytest.mark.parametrize(
    ("text", "overrides", "volumes", "message"),
    [
        (None, [], [], "does not exist"),
        ("- a list\n", [], [], "the task configuration must be a mapping of fields"),
        ("- a list\n", ["a=1"], [], "is not a task config: it must be a mapping of fields"),
        ("a: [\n", [], [], "line"),
        ("{}", ["slots"], [], 'invalid config override "slots"'),
        ("{}", [], ["/data"], "-v '/data' is not HOST_PATH:CONTAINER_PATH"),
        ("bind_mounts: 3\n", [], ["/a:/b"], "bind_mounts must be a list"),
        ("{}", ["idle_timeout=30s"], [], "is not a valid command config:\nidle_timeout"),
        ("colour: red\n", [], [], "unknown field"),
    ],
)
def test_a_bad_config_is_told_before_anything_is_sent(
    tmp_path: Path, text: str | None, overrides: list[str], volumes: list[str], message: str
) -> None:
    path = tmp_path / "config.yaml"
    if text is not None:
        path.write_text(text)
    with pytest.raises(CliError) as refused:
        _tasks.read_config(path, overrides, volumes, "COMMAND")
    assert message in str(refused.value)


def ended(code: int | None, reason: str = "") -> api_pb2.Task:
    task = api_pb2.Task(id=COMMAND_ID, task_type="COMMAND", state="TERMINATED", exit_reason=reason)
    if code is not None:
        task.exit_code = code
    return task


def test_the_cli_exits_with_the_commands_status() -> None:
    assert exit_status(ended(0)) == 0
    assert exit_status(ended(3)) == 3
    assert exit_status(ended(-9, "killed by ann")) == 137
    assert exit_status(ended(None, "canceled before it started: killed by ann")) == 1
    assert _tasks.exit_summary(ended(None, "canceled before it started: killed by ann")) == (
        "canceled before it started: killed by ann"
    )
    assert _tasks.exit_summary(ended(3, "exited with code 3")) == "exited with code 3"
    assert _tasks.exit_summary(ended(137, "killed by ann")) == "killed by ann; exit code 137"
    assert _tasks.exit_summary(api_pb2.Task(state="RUNNING")) == ""


def reporting(http_port: int, **gateway: object) -> SimpleNamespace:
    """A gateway whose GetMaster reports this HTTP port."""
    master = api_pb2.GetMasterResponse(http_port=http_port)
    stub = SimpleNamespace(GetMaster=None)
    return SimpleNamespace(stub=stub, call=lambda method, request: master, **gateway)


def test_urls_are_the_gateways_http_port() -> None:
    plain = reporting(9000, address="localhost:8080", tls=False)
    assert _tasks.proxy_url(plain, NOTEBOOK_ID) == f"http://localhost:9000/proxy/{NOTEBOOK_ID}/"  # type: ignore[arg-type]
    # A gateway that reports none (older, or told to pick a port): the master's port + 1.
    assert _tasks.http_url(reporting(0, address="[::1]:443", tls=True)) == "https://[::1]:444"  # type: ignore[arg-type]


# The HTTP port the test gateway reports.
HTTP_PORT = 18443


class TaskGateway(api_pb2_grpc.DeterminedServicer):
    """Plays the tasks' lifecycle: a launched notebook is PENDING, then RUNNING and ready
    after `polls_before_ready` GetTask calls (or TERMINATED when `dies`); a command's logs
    stream ends with its exit."""

    def __init__(self) -> None:
        self.requests: list[Any] = []
        self.polls_before_ready = 2
        self.dies = False
        self.command_ends = True
        self.lock = threading.Lock()
        self.tasks = {
            NOTEBOOK_ID: api_pb2.Task(
                id=NOTEBOOK_ID, task_type="NOTEBOOK", owner="determined", state="PENDING"
            ),
            COMMAND_ID: api_pb2.Task(id=COMMAND_ID, task_type="COMMAND", owner="determined", state="PENDING"),
            OTHERS_ID: api_pb2.Task(
                id=OTHERS_ID, task_type="NOTEBOOK", owner="ann", state="RUNNING", config_json='{"a": 1}'
            ),
        }

    def GetMaster(self, request: Any, context: grpc.ServicerContext) -> Any:
        return api_pb2.GetMasterResponse(http_port=HTTP_PORT)

    def LaunchTask(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.requests.append(request)
        task = self.tasks[NOTEBOOK_ID if request.task_type == "NOTEBOOK" else COMMAND_ID]
        task.description = "Notebook (jolly-cat)"
        return api_pb2.LaunchTaskResponse(task=task, warnings=["no pool has 1 free slot"])

    def GetTask(self, request: Any, context: grpc.ServicerContext) -> Any:
        with self.lock:
            task = self.tasks[request.task_id]
            if task.id == NOTEBOOK_ID:
                self.polls_before_ready -= 1
                if self.polls_before_ready <= 0:
                    if self.dies:
                        task.state, task.exit_code, task.exit_reason = "TERMINATED", 1, "exited with code 1"
                    else:
                        task.state, task.ready = "RUNNING", True
            return api_pb2.GetTaskResponse(task=task)

    def GetTasks(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.requests.append(request)
        found = [t for t in self.tasks.values() if request.task_type in ("", t.task_type)]
        return api_pb2.GetTasksResponse(tasks=found)

    def TaskLogs(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        self.requests.append(request)
        lines = [events_pb2.LogLine(timestamp_ns=10**18, log="hi"), events_pb2.LogLine(log="Traceback")]
        yield api_pb2.TaskLogsResponse(
            task_id=request.task_id, allocation_id=f"{request.task_id}.1", lines=lines
        )
        command = self.tasks[COMMAND_ID]
        if self.command_ends:
            command.state, command.exit_code = "TERMINATED", 3

    def KillTask(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.requests.append(request)
        if request.task_id == OTHERS_ID:
            context.abort(grpc.StatusCode.PERMISSION_DENIED, "only ann or an admin may kill it")
        return api_pb2.KillTaskResponse()

    def UpdateJob(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.requests.append(request)
        return api_pb2.UpdateJobResponse()


@pytest.fixture
def gateway() -> Iterator[tuple[str, TaskGateway]]:
    servicer = TaskGateway()
    with serving(servicer) as address:
        yield address, servicer


def test_notebook_start_waits_until_it_answers_and_prints_its_url(
    gateway: tuple[str, TaskGateway], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    address, servicer = gateway
    (tmp_path / "config.yaml").write_text("idle_timeout: 30s\n")
    argv = [
        "-m",
        address,
        "notebook",
        "start",
        "--no-browser",
        "--config-file",
        str(tmp_path / "config.yaml"),
    ]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        f"Launched notebook (id: {NOTEBOOK_ID}, name: Notebook (jolly-cat)).",
        f"Jupyter Notebook is running at: http://127.0.0.1:{HTTP_PORT}/proxy/{NOTEBOOK_ID}/",
    ]
    assert "warning: no pool has 1 free slot" in err and f"notebook {NOTEBOOK_ID} is RUNNING" not in err
    (launch,) = servicer.requests
    assert (launch.task_type, launch.config_yaml, len(launch.request_id)) == (
        "NOTEBOOK",
        "idle_timeout: 30s\n",
        32,
    )


def test_a_notebook_that_ends_before_it_answers_says_how_and_fails(
    gateway: tuple[str, TaskGateway], capsys: pytest.CaptureFixture[str]
) -> None:
    address, servicer = gateway
    servicer.dies = True
    assert main(["-m", address, "notebook", "start", "--no-browser"]) == 1
    err = capsys.readouterr().err
    assert "The end of its log:\nhi\nTraceback" in err
    assert f"notebook {NOTEBOOK_ID} ended before it was ready: exited with code 1" in err


def test_detach_prints_the_id_alone(
    gateway: tuple[str, TaskGateway], capsys: pytest.CaptureFixture[str]
) -> None:
    address, servicer = gateway
    assert main(["-m", address, "cmd", "run", "-d", "echo", "hi"]) == 0
    assert capsys.readouterr().out == f"{COMMAND_ID}\n"
    assert list(servicer.requests[0].command) == ["echo", "hi"]


def test_a_command_comes_from_the_command_line_or_the_configs_entrypoint(
    gateway: tuple[str, TaskGateway], capsys: pytest.CaptureFixture[str]
) -> None:
    address, servicer = gateway
    assert main(["-m", address, "cmd", "run"]) == 1
    assert "name the command to run" in capsys.readouterr().err and not servicer.requests
    assert main(["-m", address, "cmd", "run", "-d", "--config", "entrypoint=echo hi"]) == 0
    assert (
        list(servicer.requests[0].command) == [] and "entrypoint: echo hi" in servicer.requests[0].config_yaml
    )


def test_cmd_run_follows_the_output_and_exits_with_the_commands_code(
    gateway: tuple[str, TaskGateway], capsys: pytest.CaptureFixture[str]
) -> None:
    address, _ = gateway
    assert main(["-m", address, "cmd", "run", "echo hi; exit 3"]) == 3
    out = capsys.readouterr().out.splitlines()
    assert out[1] == f"[2001-09-09T01:46:40.000000Z] {COMMAND_ID[:8]} || hi"


def test_a_command_whose_output_ended_but_not_it_is_not_waited_for_forever(
    gateway: tuple[str, TaskGateway], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    address, servicer = gateway
    servicer.command_ends = False
    monkeypatch.setattr(_tasks, "ENDED_WAIT_S", 0.3)
    assert main(["-m", address, "cmd", "run", "sleep 600"]) == 1
    assert f"the output of command {COMMAND_ID} has ended, but it is still PENDING" in capsys.readouterr().err


def test_lists_show_yours_and_everyones_with_a(
    gateway: tuple[str, TaskGateway], capsys: pytest.CaptureFixture[str]
) -> None:
    address, _ = gateway
    assert main(["-m", address, "notebook", "list", "-q"]) == 0
    assert capsys.readouterr().out == f"{NOTEBOOK_ID}\n"
    assert main(["-m", address, "notebook", "ls", "-a"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert [cell.strip() for cell in table[0].split(" | ")] == _tasks.LIST_HEADERS
    assert len(table) == 4
    assert main(["-m", address, "task", "list"]) == 0
    rows = capsys.readouterr().out.splitlines()[2:]
    assert [row.split(" | ")[1].strip() for row in rows] == ["NOTEBOOK", "COMMAND", "NOTEBOOK"]


def test_ids_may_be_the_start_of_one(
    gateway: tuple[str, TaskGateway], capsys: pytest.CaptureFixture[str]
) -> None:
    address, servicer = gateway
    assert main(["-m", address, "notebook", "config", "9a9a"]) == 0
    assert capsys.readouterr().out == "a: 1\n"
    assert main(["-m", address, "notebook", "describe", "6f1c"]) == 0  # a command's id starts so too
    assert NOTEBOOK_ID in capsys.readouterr().out
    assert main(["-m", address, "task", "logs", "6f1c"]) == 1
    assert "2 tasks have an id starting with 6f1c: give more of it" in capsys.readouterr().err
    assert main(["-m", address, "notebook", "describe", "00"]) == 1
    assert "no notebook has an id starting with 00" in capsys.readouterr().err
    assert main(["-m", address, "notebook", "set", "priority", "9a9a", "7"]) == 0
    assert servicer.requests[-1].job_id == f"task/{OTHERS_ID}" and servicer.requests[-1].priority == 7


def test_kill_stops_at_a_refusal_unless_forced(
    gateway: tuple[str, TaskGateway], capsys: pytest.CaptureFixture[str]
) -> None:
    address, _ = gateway
    assert main(["-m", address, "notebook", "kill", OTHERS_ID, NOTEBOOK_ID]) == 1
    out, err = capsys.readouterr()
    assert out == f"Cowardly not killing {NOTEBOOK_ID}\n" and "only ann or an admin may kill it" in err
    assert main(["-m", address, "notebook", "kill", "-f", OTHERS_ID, NOTEBOOK_ID]) == 0
    out, err = capsys.readouterr()
    assert out == f"Killed notebook {NOTEBOOK_ID}\n" and f"Skipping {OTHERS_ID}" in err
