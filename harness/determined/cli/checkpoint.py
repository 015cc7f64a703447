"""`det checkpoint` (`det c`): list, describe, download and delete checkpoints.

The checkpoint tables of `det experiment list-checkpoints` and `det trial
list-checkpoints` are made here too.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from determined.cli._args import EXPERIMENT_ID
from determined.cli._client import Gateway, connect
from determined.cli._download import DownloadMode, download
from determined.cli._output import (
    compact_json,
    confirm,
    format_time,
    human_size,
    message_dict,
    print_csv,
    print_json,
    print_table,
)

if TYPE_CHECKING:
    from determined.proto import api_pb2

LIST_HEADERS = ["Trial ID", "# of Batches", "State", "Validation Metric", "UUID", "Resources", "Size"]


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser("checkpoint", aliases=["c"], help="list, download and delete checkpoints")
    verbs = parser.add_subparsers(dest="verb", metavar="<verb>")
    parser.set_defaults(run=lambda _args: parser.print_help())

    listing = verbs.add_parser("list", aliases=["ls"], help="an experiment's checkpoints")
    listing.add_argument("experiment_id", type=EXPERIMENT_ID)
    add_listing_arguments(listing)
    listing.set_defaults(run=list_experiment_checkpoints)

    describe = verbs.add_parser("describe", help="one checkpoint: its trial, metrics, metadata and files")
    describe.add_argument("uuid", type=checkpoint_uuid)
    describe.add_argument("--json", action="store_true")
    describe.set_defaults(run=describe_checkpoint)

    fetch = verbs.add_parser("download", help="download a checkpoint's files")
    fetch.add_argument("uuid", type=checkpoint_uuid)
    add_download_arguments(fetch)
    fetch.set_defaults(run=download_checkpoint)

    delete = verbs.add_parser("delete", help="delete checkpoints' files from the storage")
    delete.add_argument("uuids", type=uuid_list, metavar="UUIDS", help="comma-separated checkpoint UUIDs")
    delete.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    delete.add_argument("--json", action="store_true")
    delete.set_defaults(run=delete_checkpoints, globs=[])

    rm = verbs.add_parser("rm", help="delete the files of checkpoints that match globs")
    rm.add_argument("uuids", type=uuid_list, metavar="UUIDS", help="comma-separated checkpoint UUIDs")
    rm.add_argument(
        "--glob",
        dest="globs",
        action="append",
        type=glob,
        required=True,
        metavar="GLOB",
        help="delete the files matching this glob, e.g. 'optimizer/**' (repeatable)",
    )
    rm.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    rm.add_argument("--json", action="store_true")
    rm.set_defaults(run=delete_checkpoints)


def add_download_arguments(parser: argparse.ArgumentParser) -> None:
    """-o/--output-dir, --mode, -q/--json: how a checkpoint is downloaded (`save_checkpoint`)."""
    parser.add_argument(
        "-o",
        "--output-dir",
        type=pathlib.Path,
        metavar="DIR",
        help="where to put its files (default: checkpoints/<uuid>)",
    )
    parser.add_argument(
        "--mode",
        default="auto",
        choices=[mode.value for mode in DownloadMode],
        help="direct: from the storage; master: streamed by the master (resumes a partial "
        "download); auto (default): direct, else through the master",
    )
    output = parser.add_mutually_exclusive_group()
    output.add_argument("-q", "--quiet", action="store_true", help="print only the local path")
    output.add_argument("--json", action="store_true", help="the local path and the checkpoint as JSON")


def add_listing_arguments(parser: argparse.ArgumentParser) -> None:
    """--best, and --json or --csv, of the checkpoint listings."""
    parser.add_argument(
        "--best",
        type=best_count,
        metavar="N",
        help="only the N best by the searcher metric, best first (default: all, oldest first)",
    )
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true")
    output.add_argument("--csv", action="store_true")


def checkpoint_uuid(text: str) -> str:
    value = text.strip()
    if not value or "," in value or "/" in value:
        raise argparse.ArgumentTypeError(f"{text!r} is not a checkpoint UUID")
    return value


def uuid_list(text: str) -> list[str]:
    return [checkpoint_uuid(part) for part in text.split(",")]


def glob(text: str) -> str:
    """A glob of files inside a checkpoint: not empty, never climbing out with `..`."""
    if not text.strip():
        raise argparse.ArgumentTypeError("a glob may not be empty")
    if ".." in text.split("/"):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a glob inside the checkpoint: it may not contain .."
        )
    return text


def best_count(text: str) -> int:
    try:
        value = int(text.strip(), 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of checkpoints") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a number of checkpoints: 1 or more")
    return value


def listing_sort(args: argparse.Namespace) -> dict[str, Any]:
    """The sort and limit of a listing's request: --best N is the N best by
    the searcher metric; without it every checkpoint, oldest first."""
    if args.best:
        return {"sort_by": "searcher_metric", "max_results": args.best}
    return {}


def list_experiment_checkpoints(args: argparse.Namespace) -> int:
    from determined.proto import api_pb2

    gateway = connect(args)
    request = api_pb2.GetExperimentCheckpointsRequest(experiment_id=args.experiment_id, **listing_sort(args))
    response = gateway.call(gateway.stub.GetExperimentCheckpoints, request)
    show_checkpoints(response.checkpoints, args)
    return 0


def show_checkpoints(checkpoints: Sequence[api_pb2.Checkpoint], args: argparse.Namespace) -> None:
    if args.json:
        print_json([message_dict(c) for c in checkpoints])
    elif args.csv:
        print_csv(LIST_HEADERS, [checkpoint_row(c, size=total_size(c)) for c in checkpoints])
    else:
        print_table(LIST_HEADERS, [checkpoint_row(c, size=human_size(total_size(c))) for c in checkpoints])


def checkpoint_row(checkpoint: api_pb2.Checkpoint, *, size: object) -> list[Any]:
    """A listing's row: the files are counted (directories left out)."""
    files = sum(1 for relpath in checkpoint.resources if not relpath.endswith("/"))
    metric = checkpoint.searcher_metric if checkpoint.HasField("searcher_metric") else None
    return [
        checkpoint.trial_id,
        checkpoint.steps_completed,
        checkpoint.state,
        metric,
        checkpoint.uuid,
        files,
        size,
    ]


def total_size(checkpoint: api_pb2.Checkpoint) -> int:
    """The bytes its files take, as recorded."""
    return sum(checkpoint.resources.values())


def get_checkpoint(gateway: Gateway, uuid: str) -> api_pb2.Checkpoint:
    from determined.proto import api_pb2

    response: api_pb2.GetCheckpointResponse = gateway.call(
        gateway.stub.GetCheckpoint, api_pb2.GetCheckpointRequest(uuid=uuid)
    )
    return response.checkpoint


def describe_checkpoint(args: argparse.Namespace) -> int:
    checkpoint = get_checkpoint(connect(args), args.uuid)
    if args.json:
        print_json(message_dict(checkpoint))
    else:
        print_description(checkpoint)
    return 0


def print_description(checkpoint: api_pb2.Checkpoint) -> None:
    c = checkpoint
    print_table(
        [
            "Experiment ID",
            "Trial ID",
            "# of Batches",
            "Report Time",
            "Checkpoint UUID",
            "State",
            "Size",
            "Validation Metrics",
            "Metadata",
        ],
        [
            [
                c.experiment_id,
                c.trial_id,
                c.steps_completed,
                format_time(c.reported_at_ns),
                c.uuid,
                c.state,
                human_size(total_size(c)),
                compact_json(c.validation_metrics_json),
                compact_json(c.metadata_json),
            ]
        ],
    )
    if c.model_versions:
        print(f"Model versions: {', '.join(c.model_versions)}")
    if c.delete_error:
        print(f"Files left after a deletion failed: {c.delete_error}")
    print("\nFiles:")
    print_table(
        ["Path", "Size"],
        [
            [path, "" if path.endswith("/") else human_size(size)]
            for path, size in sorted(c.resources.items())
        ],
    )


def download_checkpoint(args: argparse.Namespace) -> int:
    gateway = connect(args)
    return save_checkpoint(gateway, get_checkpoint(gateway, args.uuid), args)


def save_checkpoint(gateway: Gateway, checkpoint: api_pb2.Checkpoint, args: argparse.Namespace) -> int:
    """Downloads the checkpoint as `args` say (--output-dir, --mode, -q, --json) and says where."""
    target = args.output_dir or pathlib.Path("checkpoints", checkpoint.uuid)
    path = download(
        gateway,
        checkpoint,
        target,
        DownloadMode(args.mode),
        say=lambda message: None if args.quiet else print(message, file=sys.stderr),
    )
    if args.json:
        print_json({"path": str(path), "checkpoint": message_dict(checkpoint)})
    elif args.quiet:
        print(path)
    else:
        print(f"Local checkpoint path:\n{path}\n")
        print_description(checkpoint)
    return 0


def delete_checkpoints(args: argparse.Namespace) -> int:
    """`delete` (every file) and `rm --glob` (the matching files)."""
    from determined.proto import api_pb2

    what = f"the files matching {', '.join(args.globs)} of" if args.globs else "every file of"
    names = ", ".join(args.uuids)
    if not args.yes and not confirm(f"Delete {what} checkpoints {names} from the storage?"):
        print("Aborted: nothing deleted.", file=sys.stderr)
        return 0
    gateway = connect(args)
    gateway.call(
        gateway.stub.DeleteCheckpoints, api_pb2.DeleteCheckpointsRequest(uuids=args.uuids, globs=args.globs)
    )
    if args.json:
        print_json({"uuids": args.uuids, "globs": args.globs, "deletion": "in progress"})
    else:
        print(f"Deletion of checkpoints {names} is in progress")
    return 0


def list_trial_checkpoints(args: argparse.Namespace) -> int:
    from determined.proto import api_pb2

    gateway = connect(args)
    request = api_pb2.GetTrialCheckpointsRequest(trial_id=args.trial_id, **listing_sort(args))
    response = gateway.call(gateway.stub.GetTrialCheckpoints, request)
    show_checkpoints(response.checkpoints, args)
    return 0
