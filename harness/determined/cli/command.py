"""`det command` (`det cmd`): run a command line on an agent, in the task's
environment, following its output; the CLI exits with the command's code."""

import argparse
from typing import Any

from determined.cli import _tasks
from determined.cli._output import notice
from determined.common.states import TaskType

COMMAND = TaskType.COMMAND
# A shell's exit status: 0 to 255; a process killed by signal N reads as 128 + N.
MAX_STATUS = 255
SIGNALED = 128


def add_parser(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = commands.add_parser("command", aliases=["cmd"], help="run commands on the cluster")
    verbs = parser.add_subparsers(dest="verb", metavar="<verb>")
    parser.set_defaults(run=lambda _args: parser.print_help())

    run = verbs.add_parser(
        "run", help="run a command (in /bin/sh -c) on an agent, follow its output, exit with its code"
    )
    _tasks.add_launch_arguments(run)
    run.add_argument(
        "entrypoint", nargs=argparse.REMAINDER, metavar="CMD...", help="the command and its arguments"
    )
    run.set_defaults(run=run_command)

    _tasks.add_shared_verbs(verbs, COMMAND)


def run_command(args: argparse.Namespace) -> int:
    gateway, task = _tasks.launch(args, COMMAND, command=args.entrypoint)
    if args.detach:
        return 0
    try:
        _tasks.print_logs(gateway, task.id, follow=True)
    except KeyboardInterrupt:
        notice(f"The command runs on. To follow its output again: det task logs -f {task.id}")
        raise
    return exit_status(_tasks.wait_ended(gateway, task.id))


def exit_status(task: Any) -> int:
    """The CLI's exit status for an ended command: its own (a process killed by signal N:
    128 + N, as a shell says it), or 1 when it never ran. Unless it simply exited, why it
    ended is told on stderr."""
    summary = _tasks.exit_summary(task)
    if not task.HasField("exit_code"):
        notice(f"command {task.id} did not run: {summary}")
        return 1
    code = int(task.exit_code)
    if summary != f"exited with code {code}":  # killed, its agent lost: say so
        notice(f"command {task.id} ended: {summary}")
    if code < 0:
        return min(SIGNALED - code, MAX_STATUS)
    return code if code <= MAX_STATUS else 1
