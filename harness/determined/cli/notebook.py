"""`det notebook`: JupyterLab on an agent, served by the gateway under
/proxy/<id>/ to its owner (and admins)."""

import argparse

from determined.cli import _tasks
from determined.common.states import TaskType

NOTEBOOK = TaskType.NOTEBOOK


def add_parser(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = commands.add_parser("notebook", help="JupyterLab on the cluster")
    verbs = parser.add_subparsers(dest="verb", metavar="<verb>")
    parser.set_defaults(run=lambda _args: parser.print_help())

    start = verbs.add_parser("start", help="start a notebook, wait until it answers, open it")
    _tasks.add_launch_arguments(start)
    start.add_argument("--no-browser", action="store_true", help="only print its URL")
    start.set_defaults(run=start_notebook)

    _tasks.add_open_verb(verbs, NOTEBOOK)
    _tasks.add_shared_verbs(verbs, NOTEBOOK)


def start_notebook(args: argparse.Namespace) -> int:
    gateway, task = _tasks.launch(args, NOTEBOOK)
    return 0 if args.detach else _tasks.serve(gateway, task, no_browser=args.no_browser)
