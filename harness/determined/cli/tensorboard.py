"""`det tensorboard`: TensorBoard over trials' tfevents files (wherever their
checkpoint storage is), served by the gateway under /proxy/<id>/."""

import argparse

from determined.cli import _tasks
from determined.cli._args import EXPERIMENT_ID, TRIAL_ID
from determined.cli._client import CliError
from determined.common.states import TaskType

TENSORBOARD = TaskType.TENSORBOARD


def add_parser(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = commands.add_parser("tensorboard", help="TensorBoard over experiments and trials")
    verbs = parser.add_subparsers(dest="verb", metavar="<verb>")
    parser.set_defaults(run=lambda _args: parser.print_help())

    start = verbs.add_parser("start", help="start a TensorBoard, wait until it answers, open it")
    start.add_argument(
        "experiment_ids", type=EXPERIMENT_ID, nargs="*", metavar="EXPERIMENT_ID", help="every trial of these"
    )
    start.add_argument(
        "-t", "--trial-ids", type=TRIAL_ID, nargs="+", default=[], metavar="TRIAL_ID", help="and these trials"
    )
    _tasks.add_launch_arguments(start, volumes=False)
    start.add_argument("--no-browser", action="store_true", help="only print its URL")
    start.set_defaults(run=start_tensorboard)

    _tasks.add_open_verb(verbs, TENSORBOARD)
    _tasks.add_shared_verbs(verbs, TENSORBOARD)


def start_tensorboard(args: argparse.Namespace) -> int:
    if not (args.experiment_ids or args.trial_ids):
        raise CliError("name the experiments (EXPERIMENT_ID ...) or trials (-t TRIAL_ID ...) to show")
    gateway, task = _tasks.launch(
        args, TENSORBOARD, experiment_ids=args.experiment_ids, trial_ids=args.trial_ids
    )
    return 0 if args.detach else _tasks.serve(gateway, task, no_browser=args.no_browser)
