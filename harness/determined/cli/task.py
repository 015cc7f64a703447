"""`det task`: every notebook, TensorBoard, command and shell, with its
allocation and state; any task's logs."""

import argparse
from typing import Any

from determined.cli import _tasks
from determined.cli._client import connect
from determined.cli._output import format_time, print_json, print_table

# Determined's `det task list` columns, with each task's kind and state.
HEADERS = [
    "Task ID",
    "Type",
    "Allocation ID",
    "Name",
    "State",
    "Slots Needed",
    "Registered Time",
    "Agent",
    "Priority",
    "Resource Pool",
    "Owner",
]


def add_parser(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = commands.add_parser("task", help="notebooks, TensorBoards, commands and shells together")
    verbs = parser.add_subparsers(dest="verb", metavar="<verb>")
    parser.set_defaults(run=list_tasks, json=False)

    listing = verbs.add_parser("list", aliases=["ls"], help="every task you may see, of every kind")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(run=list_tasks)

    _tasks.add_logs_verb(verbs, "")


def list_tasks(args: argparse.Namespace) -> int:
    found = _tasks.tasks(connect(args), "")
    if args.json:
        print_json([_tasks.task_dict(t) for t in found])
    else:
        print_table(HEADERS, [_row(t) for t in found])
    return 0


def _row(task: Any) -> list[Any]:
    return [
        task.id,
        task.task_type,
        task.allocation_id,
        task.description,
        task.state,
        task.slots,
        format_time(task.start_time_ns),
        task.agent_id or "unassigned",
        task.priority or "",  # 0: none set (a fair-share pool's job)
        task.resource_pool,
        task.owner,
    ]
