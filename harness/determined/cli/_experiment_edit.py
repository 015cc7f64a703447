"""`det experiment` verbs over what describes experiments, with Determined
0.38's names and flags: list (--all, --limit, --offset, --csv), describe of
several (--metrics, --csv, --outdir), archive, unarchive, set name|description,
label add|remove, download (--top-n, --sort-by, --smaller-is-better) and
download-model-def; and create's --parent (a fork)."""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
from typing import TYPE_CHECKING, Any

from determined.cli._args import EXPERIMENT_ID, count
from determined.cli._as_of import add_as_of_arguments
from determined.cli._client import CliError, connect
from determined.cli._experiment_describe import describe_experiments, experiment_ids
from determined.cli._experiment_verb import add_experiment_verb, experiment_verb
from determined.cli._output import format_time, message_dict, print_csv, print_json, print_table

if TYPE_CHECKING:
    from determined.proto import api_pb2

LIST_HEADERS = ["ID", "Owner", "Name", "Parent ID", "State", "Progress", "Started", "Ended", "Resource Pool"]


def add_parsers(
    parser: argparse.ArgumentParser,
    verbs: argparse._SubParsersAction[argparse.ArgumentParser],
    setting: argparse._SubParsersAction[argparse.ArgumentParser],
) -> None:
    """The verbs, on `det experiment`'s `verbs` and `set`'s `setting`; a bare
    `det experiment` lists, as `list` with no flags does."""
    parser.set_defaults(run=list_experiments, json=False, csv=False, all=False, limit=0, offset=0)
    listing = verbs.add_parser("list", aliases=["ls"], help="list experiments (archived ones with --all)")
    listing.add_argument("-a", "--all", action="store_true", help="archived ones too")
    listing.add_argument("--limit", type=count, default=0, metavar="N", help="at most N (default: all)")
    listing.add_argument("--offset", type=count, default=0, metavar="N", help="after the first N")
    _json_or_csv(listing)
    listing.set_defaults(run=list_experiments)

    describe = verbs.add_parser("describe", help="describe experiments and their trials")
    describe.add_argument("experiment_ids", type=experiment_ids, metavar="EXPERIMENT_IDS", help="1 or 1,2,3")
    describe.add_argument("--config", action="store_true", help="print the stored, fully defaulted config")
    describe.add_argument("--metrics", action="store_true", help="also each trial's metrics, step by step")
    output = describe.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true")
    output.add_argument("--csv", action="store_true", help="each table as CSV")
    output.add_argument(
        "--outdir", type=pathlib.Path, metavar="DIR", help="write experiments.csv, trials.csv (workloads.csv)"
    )
    add_as_of_arguments(describe)
    describe.set_defaults(run=describe_experiments)

    add_experiment_verb(
        verbs, "archive", archive, "archive an ended experiment: it leaves det experiment list unless --all"
    )
    add_experiment_verb(verbs, "unarchive", unarchive, "unarchive an experiment")

    labels = verbs.add_parser("label", help="add or remove an experiment's labels")
    label_verbs = labels.add_subparsers(dest="label_verb", metavar="<verb>", required=True)
    for verb, run in (("add", add_label), ("remove", remove_label)):
        labeling = label_verbs.add_parser(verb, help=f"{verb} a label")
        labeling.add_argument("experiment_id", type=EXPERIMENT_ID)
        labeling.add_argument("label")
        labeling.set_defaults(run=run)

    for field in ("name", "description"):
        change = setting.add_parser(field, help=f"set the experiment's {field}")
        change.add_argument("experiment_id", type=EXPERIMENT_ID)
        change.add_argument("value", metavar=field.upper())
        change.set_defaults(run=set_detail, field=field)

    _add_download_parsers(verbs)
    create: argparse.ArgumentParser = verbs.choices["create"]
    create.add_argument(
        "--parent",
        type=EXPERIMENT_ID,
        metavar="ID",
        default=0,
        help="fork experiment ID: the new one records it as its parent and, without CONTEXT, runs its context",
    )


def _add_download_parsers(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from determined.cli._download import DownloadMode

    download = verbs.add_parser("download", help="download an experiment's best checkpoints")
    download.add_argument("experiment_id", type=EXPERIMENT_ID)
    download.add_argument(
        "-o", "--output-dir", type=pathlib.Path, default=pathlib.Path("checkpoints"), metavar="DIR",
        help="each checkpoint goes to DIR/<uuid> (default: checkpoints)",
    )  # fmt: skip
    download.add_argument("--top-n", type=_positive, default=1, metavar="N", help="the N best (default 1)")
    download.add_argument(
        "--sort-by", metavar="METRIC", help="a validation metric (default: the searcher's; then also give "
        "--smaller-is-better)",
    )  # fmt: skip
    download.add_argument("--smaller-is-better", type=_true_or_false, metavar="true|false")
    download.add_argument(
        "--mode", default="auto", choices=[mode.value for mode in DownloadMode],
        help="as det checkpoint download's: direct, master or auto (default)",
    )  # fmt: skip
    download.add_argument("-q", "--quiet", action="store_true", help="print only the local paths")
    download.set_defaults(run=download_best)

    model_def = verbs.add_parser("download-model-def", help="save the context it was created with as a .tgz")
    model_def.add_argument("experiment_id", type=EXPERIMENT_ID)
    model_def.add_argument("--output-dir", type=pathlib.Path, default=pathlib.Path("."), metavar="DIR")
    model_def.set_defaults(run=download_model_def)


# -- argument types ------------------------------------------------------------------


def _positive(text: str) -> int:
    value = count(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not 1 or more")
    return value


def _true_or_false(text: str) -> bool:
    """As Determined's strtobool: true/false, yes/no, on/off, 1/0."""
    answer = {"true": True, "yes": True, "y": True, "on": True, "1": True, "t": True}.get(
        text.strip().lower()
    )
    if answer is None and text.strip().lower() not in ("false", "no", "n", "off", "0", "f"):
        raise argparse.ArgumentTypeError(f"{text!r} is not true or false")
    return bool(answer)


def _json_or_csv(parser: argparse.ArgumentParser) -> None:
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true")
    output.add_argument("--csv", action="store_true")


# -- list ----------------------------------------------------------------------------


def list_experiments(args: argparse.Namespace) -> int:
    """Without --all, archived ones are left out (as Determined's)."""
    from determined.proto import api_pb2

    gateway = connect(args)
    request = api_pb2.GetExperimentsRequest(limit=args.limit, offset=args.offset)
    if not args.all:
        request.archived = False
    response = gateway.call(gateway.stub.GetExperiments, request)
    if args.json:
        print_json([message_dict(e) for e in response.experiments])
        return 0
    headers = LIST_HEADERS + (["Archived"] if args.all else [])
    rows = [_list_row(e, archived=args.all) for e in response.experiments]
    (print_csv if args.csv else print_table)(headers, rows)
    shown = args.offset + len(response.experiments)
    if response.total > shown:
        print(
            f"(experiments {args.offset + 1}-{shown} of {response.total}; --offset {shown} shows the next)",
            file=sys.stderr,
        )
    return 0


def _list_row(e: api_pb2.Experiment, *, archived: bool) -> list[Any]:
    return [
        e.id,
        e.owner,
        e.name,
        e.parent_id or "",
        e.state,
        f"{e.progress:.1%}" if e.progress else "",
        format_time(e.started_at_ns),
        format_time(e.ended_at_ns),
        e.resource_pool,
    ] + ([e.archived] if archived else [])


# -- edits ---------------------------------------------------------------------------


def archive(args: argparse.Namespace) -> int:
    return experiment_verb(args, "Archive", "Archived")


def unarchive(args: argparse.Namespace) -> int:
    return experiment_verb(args, "Unarchive", "Unarchived")


def set_detail(args: argparse.Namespace) -> int:
    """det experiment set name|description N VALUE."""
    from determined.proto import api_pb2

    request = api_pb2.PatchExperimentRequest(experiment_id=args.experiment_id, **{args.field: args.value})
    done = f"Set {args.field} of experiment {args.experiment_id} to '{args.value}'"
    return _edit(args, "PatchExperiment", request, done)


def add_label(args: argparse.Namespace) -> int:
    from determined.proto import api_pb2

    request = api_pb2.PutExperimentLabelRequest(experiment_id=args.experiment_id, label=args.label)
    done = f"Added label '{args.label}' to experiment {args.experiment_id}"
    return _edit(args, "PutExperimentLabel", request, done)


def remove_label(args: argparse.Namespace) -> int:
    from determined.proto import api_pb2

    request = api_pb2.DeleteExperimentLabelRequest(experiment_id=args.experiment_id, label=args.label)
    done = f"Removed label '{args.label}' from experiment {args.experiment_id}"
    return _edit(args, "DeleteExperimentLabel", request, done)


def _edit(args: argparse.Namespace, rpc: str, request: Any, done: str) -> int:
    """Calls the edit's RPC and says what it did."""
    gateway = connect(args)
    gateway.call(getattr(gateway.stub, rpc), request)
    print(done)
    return 0


# -- downloads -----------------------------------------------------------------------


def download_best(args: argparse.Namespace) -> int:
    """The --top-n best checkpoints by the searcher metric (or --sort-by's),
    each into --output-dir/<uuid> as det checkpoint download does; only
    checkpoints with that metric count."""
    from determined.cli._download import DownloadMode, download
    from determined.cli.checkpoint import print_description
    from determined.proto import api_pb2

    if (args.sort_by is None) != (args.smaller_is_better is None):
        raise CliError("--sort-by and --smaller-is-better go together: give both or neither")
    gateway = connect(args)
    request = api_pb2.GetExperimentCheckpointsRequest(
        experiment_id=args.experiment_id,
        sort_by=args.sort_by or "searcher_metric",
        order_by="" if args.sort_by is None else "asc" if args.smaller_is_better else "desc",
        max_results=args.top_n,
    )
    listed = gateway.call(gateway.stub.GetExperimentCheckpoints, request).checkpoints
    best = [c for c in listed if _has_metric(c, args.sort_by)]
    if not best:
        metric = f"validation metric {args.sort_by!r}" if args.sort_by else "searcher metric"
        raise CliError(f"experiment {args.experiment_id} has no checkpoint with its {metric} to download")
    for checkpoint in best:
        path = download(
            gateway,
            checkpoint,
            args.output_dir / checkpoint.uuid,
            DownloadMode(args.mode),
            say=lambda message: None if args.quiet else print(message, file=sys.stderr),
        )
        if args.quiet:
            print(path)
        else:
            print(f"Local checkpoint path:\n{path}\n")
            print_description(checkpoint)
            print()
    return 0


def _has_metric(checkpoint: api_pb2.Checkpoint, metric: str | None) -> bool:
    if metric is None:
        return bool(checkpoint.HasField("searcher_metric"))
    value = json.loads(checkpoint.validation_metrics_json or "{}").get(metric)
    return isinstance(value, int | float) and not isinstance(value, bool)


def download_model_def(args: argparse.Namespace) -> int:
    from determined.cli._model_def import save_model_def

    print(save_model_def(connect(args), args.experiment_id, args.output_dir))
    return 0
