"""What `det notebook`, `det tensorboard`, `det cmd` and `det shell` share: launching a
task (its config, context and LaunchTask), waiting until its server answers, the
gateway's URL of it, and the verbs every kind has (list, describe, config, logs,
kill, set priority). Determined's verbs, flags and output shapes (its cli/ntsc.py).

A task id is a UUID; every verb also takes the start of one, expanded from the
tasks of that kind, as Determined does.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from determined.cli import _args
from determined.cli._args import FULL_TASK_ID as FULL_TASK_ID  # shell.py names it from here
from determined.cli._client import CliError, Gateway, connect
from determined.cli._output import message_dict, notice, print_json, print_table
from determined.common import states
from determined.common.states import TaskState, TaskType

if TYPE_CHECKING:
    from determined.common.expconf import TaskConfig

# How each kind is named in sentences ("Launched notebook ...").
KIND_WORDS: dict[str, str] = {
    TaskType.NOTEBOOK: "notebook",
    TaskType.TENSORBOARD: "TensorBoard",
    TaskType.COMMAND: "command",
    TaskType.SHELL: "shell",
}
# Determined's list columns (cli/ntsc.py), less workspaceName: there are no workspaces here.
LIST_HEADERS = ["id", "username", "description", "state", "exitStatus", "resourcePool"]
TENSORBOARD_HEADERS = [*LIST_HEADERS[:4], "experimentIds", "trialIds", *LIST_HEADERS[4:]]
# What `start` says is running at the URL it prints (Determined's words).
SERVED_AS: dict[str, str] = {TaskType.NOTEBOOK: "Jupyter Notebook", TaskType.TENSORBOARD: "TensorBoard"}
TASK_ID_TEXT = re.compile(r"^[0-9a-f-]{1,36}$")
# Polling GetTask while a task starts: soon at first, then every half second.
FIRST_POLL_S = 0.1
MAX_POLL_S = 0.5
# How long a task whose log stream has ended may take to show TERMINATED.
ENDED_WAIT_S = 60.0
# The end of the log shown when a task ends before it is ready.
LOG_TAIL_LINES = 20
TERMINATED = TaskState.TERMINATED


def task_id(text: str) -> str:
    """An argparse `type`: a task id (a UUID), or the start of one."""
    value = text.strip().lower()
    if not TASK_ID_TEXT.match(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a task id (a UUID, or the start of one)")
    return value


def add_launch_arguments(parser: argparse.ArgumentParser, *, volumes: bool = True) -> None:
    """The flags every `start`/`run` takes (Determined's): the config, its overrides,
    the files to upload, bind mounts (`volumes`) and --detach."""
    parser.add_argument("--config-file", type=Path, metavar="FILE", help="the task's config (YAML)")
    parser.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a config field, e.g. --config resources.slots=0 (repeatable)",
    )
    parser.add_argument(
        "-c", "--context", type=Path, metavar="DIR", help="a folder whose contents become the work dir"
    )
    parser.add_argument(
        "-i",
        "--include",
        action="append",
        default=[],
        type=Path,
        metavar="PATH",
        help="also upload this file or folder, under its own name (repeatable)",
    )
    if volumes:
        parser.add_argument(
            "-v",
            "--volume",
            action="append",
            default=[],
            metavar="HOST:CONTAINER",
            help="bind-mount a host path into the task (repeatable)",
        )
    parser.add_argument("-d", "--detach", action="store_true", help="only start it and print its id")


def add_shared_verbs(verbs: argparse._SubParsersAction[argparse.ArgumentParser], task_type: str) -> None:
    """list, describe, config, logs, kill and set priority for the tasks of `task_type`."""
    word = KIND_WORDS[task_type]
    listing = verbs.add_parser("list", aliases=["ls"], help=f"your {word}s (-a: everyone's)")
    listing.add_argument("-a", "--all", action="store_true", help="other users' too (as you may see them)")
    output = listing.add_mutually_exclusive_group()
    output.add_argument("-q", "--quiet", action="store_true", help="only the ids")
    output.add_argument("--json", action="store_true")
    listing.set_defaults(run=list_tasks, task_type=task_type)

    describe = verbs.add_parser("describe", help=f"one {word}")
    describe.add_argument("task_id", type=task_id, metavar="ID")
    describe.add_argument("--json", action="store_true")
    describe.set_defaults(run=describe_task, task_type=task_type)

    config = verbs.add_parser("config", help=f"a {word}'s config as YAML, defaults applied")
    config.add_argument("task_id", type=task_id, metavar="ID")
    config.set_defaults(run=print_config, task_type=task_type)

    add_logs_verb(verbs, task_type)

    kill = verbs.add_parser("kill", help=f"kill {word}s")
    kill.add_argument("task_ids", type=task_id, nargs="+", metavar="ID")
    kill.add_argument("-f", "--force", action="store_true", help="go on past one that cannot be killed")
    kill.set_defaults(run=kill_tasks, task_type=task_type)

    setting = verbs.add_parser("set", help=f"change a {word}'s scheduling")
    what = setting.add_subparsers(dest="setting", metavar="<setting>", required=True)
    priority = what.add_parser("priority", help="1 to 99; lower runs first (priority pools)")
    priority.add_argument("task_id", type=task_id, metavar="ID")
    priority.add_argument("priority", type=_args.priority)
    priority.set_defaults(run=set_priority, task_type=task_type)


def add_logs_verb(verbs: argparse._SubParsersAction[argparse.ArgumentParser], task_type: str) -> None:
    """`logs ID [-f] [--json]` of the tasks of `task_type` ("": any kind)."""
    logs = verbs.add_parser("logs", help=f"a {KIND_WORDS.get(task_type, 'task')}'s logs")
    logs.add_argument("task_id", type=task_id, metavar="ID")
    logs.add_argument("-f", "--follow", action="store_true", help="keep streaming until it ends")
    logs.add_argument("--json", action="store_true", help="one JSON object per line")
    logs.set_defaults(run=show_logs, task_type=task_type)


# -- launching ------------------------------------------------------------------------------


def launch(
    args: argparse.Namespace,
    task_type: str,
    *,
    command: Sequence[str] = (),
    experiment_ids: Sequence[int] = (),
    trial_ids: Sequence[int] = (),
    shell_public_key: str = "",
) -> tuple[Gateway, Any]:
    """Reads the config and the files to upload (checked before anything is sent),
    uploads them and launches the task. Says so ("Launched ...", or with --detach its id
    alone) and returns the gateway and the Task."""
    from determined.cli._upload import upload_context
    from determined.cli.experiment import prepare_context
    from determined.proto import api_pb2

    config_yaml, config = read_config(args.config_file, args.config, getattr(args, "volume", []), task_type)
    if task_type == TaskType.COMMAND and not command and config.entrypoint is None:
        raise CliError("name the command to run: det cmd run CMD [ARG ...], or its config's entrypoint")
    files = prepare_context(args.context, args.include)
    gateway = connect(args)
    request = api_pb2.LaunchTaskRequest(
        task_type=task_type,
        config_yaml=config_yaml,
        context_hash=upload_context(gateway, files) if files else "",
        command=command,
        experiment_ids=experiment_ids,
        trial_ids=trial_ids,
        shell_public_key=shell_public_key,
        request_id=uuid.uuid4().hex,
    )
    response = gateway.call(gateway.stub.LaunchTask, request)
    for warning in response.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    task = response.task
    if args.detach:
        print(task.id)
    else:
        print(f"Launched {KIND_WORDS[task_type]} (id: {task.id}, name: {task.description}).", flush=True)
    return gateway, task


def read_config(
    path: Path | None, overrides: Sequence[str], volumes: Sequence[str], task_type: str
) -> tuple[str, TaskConfig]:
    """The config text to send ("" for the defaults): the file, with each --config
    KEY=VALUE and -v HOST:CONTAINER applied; and what it says, validated here first (as
    the gateway validates it again) so that a typo costs no upload."""
    import yaml

    from determined.common import expconf

    text, raw = _read_config_file(path) if path else ("", None)
    if overrides or volumes:
        if raw is not None and not isinstance(raw, dict):
            raise CliError(f"{path} is not a task config: it must be a mapping of fields")
        config = _with_mounts(_with_overrides(dict(raw or {}), overrides), volumes)
        text = str(yaml.safe_dump(config, sort_keys=False))
    try:
        return text, expconf.load_task_config(text, task_type)
    except expconf.InvalidConfigError as problem:
        where = path or "the config"
        raise CliError(f"{where} is not a valid {KIND_WORDS[task_type]} config:\n{problem}") from None


def _with_overrides(config: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    from determined.common import expconf

    try:
        return expconf.apply_overrides(config, overrides)
    except expconf.InvalidConfigError as problem:
        raise CliError(str(problem)) from None


def _with_mounts(config: dict[str, Any], volumes: Sequence[str]) -> dict[str, Any]:
    mounts = [bind_mount(volume) for volume in volumes]
    if not mounts:
        return config
    present = config.get("bind_mounts") or []
    if not isinstance(present, list):
        raise CliError("bind_mounts must be a list to add -v/--volume mounts to it")
    return {**config, "bind_mounts": [*present, *mounts]}


def _read_config_file(path: Path) -> tuple[str, Any]:
    """The file's text and what it holds, read within the config limits."""
    from determined.common import expconf

    if not path.is_file():
        raise CliError(f"config file {path} {'is not a file' if path.exists() else 'does not exist'}")
    size = path.stat().st_size
    if size > expconf.MAX_CONFIG_BYTES:
        raise CliError(f"config file {path} is {size} bytes; a config is at most {expconf.MAX_CONFIG_BYTES}")
    try:
        text = path.read_text(encoding="utf-8")
        return text, expconf.parse_yaml(text)
    except UnicodeDecodeError as problem:
        raise CliError(f"{path} is not UTF-8 text: {problem.reason} at byte {problem.start}") from None
    except expconf.InvalidConfigError as problem:
        raise CliError(f"{path}: {problem}") from None


def bind_mount(volume: str) -> dict[str, str]:
    """-v HOST:CONTAINER as a bind_mounts entry."""
    host, colon, container = volume.partition(":")
    if not (colon and host and container):
        raise CliError(f"-v {volume!r} is not HOST_PATH:CONTAINER_PATH")
    return {"host_path": host, "container_path": container}


def wait_ready(gateway: Gateway, task: Any) -> Any:
    """Polls the task until its server answers; returns it then. A task that ends
    first is a CliError saying how it ended, after the end of its log (on stderr)."""
    word = KIND_WORDS[task.task_type]
    notice(f"Waiting for {word} {task.id} to become ready...")
    try:
        task = _polled_until_ready(gateway, task)
    except KeyboardInterrupt:
        notice(f"The {word} starts on; to stop it: det {word.lower()} kill {task.id}")
        raise
    notice(f"{word} (id: {task.id}) is ready.")
    return task


def _polled_until_ready(gateway: Gateway, task: Any) -> Any:
    pause = FIRST_POLL_S
    state = task.state
    while not task.ready:
        if task.state == TERMINATED:
            _tell_log_tail(gateway, task.id)
            word = KIND_WORDS[task.task_type]
            raise CliError(f"{word} {task.id} ended before it was ready: {exit_summary(task)}")
        if task.state != state:
            state = task.state
            notice(f"{KIND_WORDS[task.task_type]} {task.id} is {state}")
        time.sleep(pause)
        pause = min(pause * 2, MAX_POLL_S)
        task = get_task(gateway, task.id)
    return task


def wait_ended(gateway: Gateway, full_id: str) -> Any:
    """Polls the task, whose log stream has ended, until it is TERMINATED (the read model
    shows it a moment later); returns it then. CliError past ENDED_WAIT_S."""
    pause = FIRST_POLL_S
    deadline = time.monotonic() + ENDED_WAIT_S
    task = get_task(gateway, full_id)
    while task.state != TERMINATED:
        if time.monotonic() > deadline:
            word = KIND_WORDS[task.task_type]
            raise CliError(
                f"the output of {word} {full_id} has ended, but it is still {task.state} after "
                f"{ENDED_WAIT_S:.0f} s: see det {word.lower()} describe {full_id}"
            )
        time.sleep(pause)
        pause = min(pause * 2, MAX_POLL_S)
        task = get_task(gateway, full_id)
    return task


def _tell_log_tail(gateway: Gateway, task_id: str) -> None:
    from determined.proto import api_pb2

    request = api_pb2.TaskLogsRequest(task_id=task_id)
    lines = deque(
        (line.log for response in gateway.stream(gateway.stub.TaskLogs, request) for line in response.lines),
        maxlen=LOG_TAIL_LINES,
    )
    if lines:
        notice("The end of its log:\n" + "\n".join(lines))


def exit_summary(task: Any) -> str:
    """How a task ended, in words, with its exit code when it ran ("" while it has not
    ended): "exited with code 3", "killed by ann; exit code 137", "canceled before it
    started: killed by ann" (the words the gateway's proxy uses too)."""
    if task.state != TERMINATED:
        return ""
    return states.task_exit_summary(task.exit_reason, task.exit_code if task.HasField("exit_code") else None)


def http_url(gateway: Gateway) -> str:
    """The gateway's HTTP address (the web UI's, and /proxy/'s): the port it reports, else
    the master's port + 1, as `det deploy local cluster-up` serves it by default."""
    from determined.proto import api_pb2

    host, _, port = gateway.address.rpartition(":")
    http_port = gateway.call(gateway.stub.GetMaster, api_pb2.GetMasterRequest()).http_port
    return f"{'https' if gateway.tls else 'http'}://{host}:{http_port or int(port) + 1}"


def proxy_url(gateway: Gateway, task_id: str) -> str:
    """Where the gateway serves the task's server, for its owner."""
    return f"{http_url(gateway)}/proxy/{task_id}/"


def serve(gateway: Gateway, task: Any, *, no_browser: bool) -> int:
    """Waits until the task's server (JupyterLab, TensorBoard) answers, then prints its
    URL and opens it in the browser (unless `no_browser`)."""
    import webbrowser

    url = proxy_url(gateway, wait_ready(gateway, task).id)
    if not no_browser:
        webbrowser.open(url)
    print(f"{SERVED_AS[task.task_type]} is running at: {url}")
    return 0


def open_task(args: argparse.Namespace) -> int:
    """`open ID`: a running notebook or TensorBoard in the browser."""
    gateway = connect(args)
    task = get_task(gateway, resolve(gateway, args.task_id, args.task_type))
    if task.state == TERMINATED:
        raise CliError(f"{KIND_WORDS[task.task_type]} {task.id} has ended ({exit_summary(task)})")
    return serve(gateway, task, no_browser=False)


def add_open_verb(verbs: argparse._SubParsersAction[argparse.ArgumentParser], task_type: str) -> None:
    opening = verbs.add_parser("open", help=f"open a running {KIND_WORDS[task_type]} in the browser")
    opening.add_argument("task_id", type=task_id, metavar="ID")
    opening.set_defaults(run=open_task, task_type=task_type)


# -- reading and changing tasks -------------------------------------------------------------


def get_task(gateway: Gateway, full_id: str) -> Any:
    from determined.proto import api_pb2

    return gateway.call(gateway.stub.GetTask, api_pb2.GetTaskRequest(task_id=full_id)).task


def tasks(gateway: Gateway, task_type: str) -> list[Any]:
    """Every task of `task_type` ("": any) the user may see, ended ones too."""
    from determined.proto import api_pb2

    request = api_pb2.GetTasksRequest(task_type=task_type, include_terminated=True)
    return list(gateway.call(gateway.stub.GetTasks, request).tasks)


def resolve(gateway: Gateway, prefix: str, task_type: str) -> str:
    """The full id of the one task of `task_type` ("": any) whose id starts with `prefix`."""
    if FULL_TASK_ID.match(prefix):
        return prefix
    found = [str(t.id) for t in tasks(gateway, task_type) if t.id.startswith(prefix)]
    what = KIND_WORDS.get(task_type, "task")
    if not found:
        raise CliError(f"no {what} has an id starting with {prefix}")
    if len(found) > 1:
        raise CliError(f"{len(found)} {what}s have an id starting with {prefix}: give more of it")
    return found[0]


def list_tasks(args: argparse.Namespace) -> int:
    gateway = connect(args)
    found = tasks(gateway, args.task_type)
    if not args.all:
        found = [t for t in found if t.owner == gateway.session.user]
    if args.quiet:
        print("\n".join(t.id for t in found))
    elif args.json:
        print_json([task_dict(t) for t in found])
    else:
        print_table(_headers(args.task_type), [_row(t) for t in found])
    return 0


def describe_task(args: argparse.Namespace) -> int:
    gateway = connect(args)
    task = get_task(gateway, resolve(gateway, args.task_id, args.task_type))
    if args.json:
        print_json(task_dict(task))
    else:
        print_table(_headers(task.task_type), [_row(task)])
    return 0


def task_dict(task: Any) -> dict[str, Any]:
    """A task as --json prints it: exit_code null until it has one."""
    plain = message_dict(task)
    if not task.HasField("exit_code"):
        plain["exit_code"] = None
    return plain


def _headers(task_type: str) -> list[str]:
    return TENSORBOARD_HEADERS if task_type == TaskType.TENSORBOARD else LIST_HEADERS


def _row(task: Any) -> list[Any]:
    row = [task.id, task.owner, task.description, task.state, exit_summary(task), task.resource_pool]
    if task.task_type == TaskType.TENSORBOARD:
        row[4:4] = [_ids(task.experiment_ids), _ids(task.trial_ids)]
    return row


def _ids(ids: Sequence[int]) -> str:
    return ",".join(str(i) for i in ids)


def print_config(args: argparse.Namespace) -> int:
    import yaml

    gateway = connect(args)
    task = get_task(gateway, resolve(gateway, args.task_id, args.task_type))
    print(yaml.safe_dump(json.loads(task.config_json or "{}"), sort_keys=False), end="")
    return 0


def show_logs(args: argparse.Namespace) -> int:
    gateway = connect(args)
    print_logs(gateway, resolve(gateway, args.task_id, args.task_type), follow=args.follow, as_json=args.json)
    return 0


def print_logs(gateway: Gateway, full_id: str, *, follow: bool, as_json: bool = False) -> None:
    """Writes the task's log lines as `det trial logs` does, flushing once per response;
    with `follow`, until the task ends."""
    from determined.cli.trial import log_lines
    from determined.proto import api_pb2

    request = api_pb2.TaskLogsRequest(task_id=full_id, follow=follow)
    write: Callable[[Any], str] = _json_log_lines if as_json else log_lines
    for response in gateway.stream(gateway.stub.TaskLogs, request):
        sys.stdout.write(write(response))
        sys.stdout.flush()


def _json_log_lines(response: Any) -> str:
    head = {
        "task_id": response.task_id,
        "allocation_id": response.allocation_id,
        "agent_id": response.agent_id,
    }
    return "".join(json.dumps({**head, "line": message_dict(line)}) + "\n" for line in response.lines)


def kill_tasks(args: argparse.Namespace) -> int:
    """Kills each in turn; a failure stops there (naming those left alive) unless --force."""
    from determined.proto import api_pb2

    gateway = connect(args)
    word = KIND_WORDS[args.task_type]
    for index, prefix in enumerate(args.task_ids):
        try:
            full_id = resolve(gateway, prefix, args.task_type)
            response = gateway.call(gateway.stub.KillTask, api_pb2.KillTaskRequest(task_id=full_id))
        except CliError as failure:
            if not args.force:
                for spared in args.task_ids[index + 1 :]:
                    print(f"Cowardly not killing {spared}")
                raise
            print(f"Skipping {prefix}: {failure}", file=sys.stderr)
            continue
        print(response.unchanged_reason or f"Killed {word} {full_id}")
    return 0


def set_priority(args: argparse.Namespace) -> int:
    from determined.cli.job import send_update

    gateway = connect(args)
    full_id = resolve(gateway, args.task_id, args.task_type)
    print(send_update(gateway, f"task/{full_id}", priority=args.priority))
    return 0
