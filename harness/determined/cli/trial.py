"""`det trial` (`det t`): describe or kill a trial, show or follow its logs, download its checkpoints."""

import argparse
import json
import sys
from typing import Any

from determined.cli._args import TRIAL_ID
from determined.cli._client import CliError, Gateway, connect
from determined.cli._log_filters import add_log_filter_args, log_request
from determined.cli._output import (
    compact_json,
    format_log_time,
    format_time,
    message_dict,
    print_json,
    print_table,
)
from determined.cli.checkpoint import (
    add_download_arguments,
    add_listing_arguments,
    checkpoint_uuid,
    get_checkpoint,
    list_trial_checkpoints,
    save_checkpoint,
)
from determined.common import states


def add_parser(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = commands.add_parser("trial", aliases=["t"], help="inspect trials")
    verbs = parser.add_subparsers(dest="verb", metavar="<verb>")
    parser.set_defaults(run=lambda _args: parser.print_help())

    describe = verbs.add_parser("describe", help="a trial's state, hyperparameters, metrics and checkpoints")
    describe.add_argument("trial_id", type=TRIAL_ID)
    describe.add_argument("--json", action="store_true")
    describe.set_defaults(run=describe_trial)

    checkpoints = verbs.add_parser("list-checkpoints", aliases=["lc"], help="a trial's checkpoints")
    checkpoints.add_argument("trial_id", type=TRIAL_ID)
    add_listing_arguments(checkpoints)
    checkpoints.set_defaults(run=list_trial_checkpoints)

    kill = verbs.add_parser("kill", help="kill one trial; it ends CANCELED")
    kill.add_argument("trial_id", type=TRIAL_ID)
    kill.set_defaults(run=kill_trial)

    logs = verbs.add_parser("logs", help="a trial's logs")
    logs.add_argument("trial_id", type=TRIAL_ID)
    add_log_filter_args(logs)
    logs.set_defaults(run=show_logs)

    download = verbs.add_parser("download", help="download one of a trial's checkpoints")
    download.add_argument("trial_id", type=TRIAL_ID)
    which = download.add_mutually_exclusive_group(required=True)
    which.add_argument("--best", action="store_true", help="the best by the searcher metric (or --sort-by)")
    which.add_argument("--latest", action="store_true", help="the one of the most batches")
    which.add_argument("--uuid", type=checkpoint_uuid, help="this one")
    download.add_argument("--sort-by", metavar="METRIC", help="with --best: best by this validation metric")
    download.add_argument(
        "--smaller-is-better",
        type=_true_or_false,
        metavar="(true|false)",
        help="with --sort-by (and required by it): whether smaller values of the metric are better",
    )
    add_download_arguments(download)
    download.set_defaults(run=download_trial_checkpoint)

    metrics = verbs.add_parser("metrics", help="every stored metric point of a trial")
    metrics.add_argument("trial_id", type=TRIAL_ID)
    metrics.add_argument("--group", default="", help='only this group ("training", "validation", ...)')
    output = metrics.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="a JSON array of points")
    output.add_argument(
        "--csv",
        action="store_true",
        help="CSV: group, steps_completed, reported_at, then one column per metric",
    )
    metrics.set_defaults(run=show_metrics)


def outcome(trial: Any) -> str:
    """Why a trial stopped or ended, for people: the reason the system gave
    ("cut at rung 0 (58 batches)", "killed by a user", "allocation 3.2 exited
    with code 1 ..."), else what its state says ("" while it trains)."""
    stopped = states.is_terminal(trial.state) or trial.state == states.TrialState.PAUSED
    return str(trial.end_reason or (trial.state.lower() if stopped else ""))


def _get_trial(gateway: Gateway, trial_id: int) -> Any:
    from determined.proto import api_pb2

    return gateway.call(gateway.stub.GetTrial, api_pb2.GetTrialRequest(trial_id=trial_id))


def trial_state(gateway: Gateway, trial_id: int) -> str:
    return str(_get_trial(gateway, trial_id).trial.state)


def describe_trial(args: argparse.Namespace) -> int:
    response = _get_trial(connect(args), args.trial_id)
    if args.json:
        print_json(message_dict(response))
        return 0
    t = response.trial
    print_table(
        [
            "Trial ID",
            "Experiment ID",
            "State",
            "Progress",
            "# of Batches",
            "Rung",
            "Runs",
            "Restarts",
            "Reason",
            "H-Params",
            "Started",
            "Ended",
        ],
        [
            [
                t.id,
                t.experiment_id,
                t.state,
                f"{t.progress:.1%}",
                t.total_batches,
                t.rung,
                t.runs,
                t.restarts,
                outcome(t),
                compact_json(t.hparams_json),
                format_time(t.started_at_ns),
                format_time(t.ended_at_ns),
            ]
        ],
    )
    if t.status:
        print(f"Status: {t.status}")
    print("\nLatest metrics:")
    print_table(
        ["Group", "# of Batches", "Report Time", "Metrics"],
        [
            [m.group, m.steps_completed, format_time(m.reported_at_ns), compact_json(m.metrics_json)]
            for m in (t.latest_training, t.latest_validation)
            if m.group
        ],
    )
    print("\nRuns:")
    print_table(
        ["Run", "Allocation ID", "Agents", "State", "Exit Code", "Reason", "Assigned", "Ended"],
        [
            [
                r.trial_run_id,
                r.allocation_id,
                ",".join(r.agent_ids),
                r.state,
                r.exit_code if r.exited_at_ns else "",
                r.reason,
                format_time(r.assigned_at_ns),
                format_time(r.exited_at_ns),
            ]
            for r in response.runs
        ],
    )
    print("\nCheckpoints:")
    print_table(
        ["UUID", "# of Batches", "State", "Report Time", "Metadata"],
        [
            [c.uuid, c.steps_completed, c.state, format_time(c.reported_at_ns), compact_json(c.metadata_json)]
            for c in response.checkpoints
        ],
    )
    return 0


def kill_trial(args: argparse.Namespace) -> int:
    from determined.proto import api_pb2

    gateway = connect(args)
    response = gateway.call(gateway.stub.KillTrial, api_pb2.KillTrialRequest(trial_id=args.trial_id))
    print(response.unchanged_reason or f"Killed trial {args.trial_id}")
    return 0


def show_metrics(args: argparse.Namespace) -> int:
    from determined.cli import _metrics
    from determined.proto import api_pb2

    gateway = connect(args)
    request = api_pb2.GetTrialMetricsRequest(trial_id=args.trial_id, group=args.group)
    points = (
        point
        for response in gateway.stream(gateway.stub.GetTrialMetrics, request)
        for point in response.points
    )
    if args.json:
        _metrics.write_json(points, sys.stdout)
    else:
        _metrics.write_rows(points, sys.stdout, as_csv=args.csv)
    return 0


def show_logs(args: argparse.Namespace) -> int:
    write_logs(connect(args), log_request(args, args.trial_id), as_json=args.json)
    return 0


def follow_logs(gateway: Gateway, trial_id: int, *, follow: bool) -> None:
    """Every line of the trial's logs (`follow`: until the trial ends)."""
    from determined.proto import api_pb2

    write_logs(gateway, api_pb2.TrialLogsRequest(trial_id=trial_id, follow=follow), as_json=False)


def write_logs(gateway: Gateway, request: Any, *, as_json: bool) -> None:
    """Writes each response's lines at once and flushes once per response:
    a response holds up to a stored batch (hundreds of lines)."""
    out = sys.stdout
    for entry in gateway.stream(gateway.stub.TrialLogs, request):
        out.write(json_log_lines(entry) if as_json else log_lines(entry))
        out.flush()


def download_trial_checkpoint(args: argparse.Namespace) -> int:
    """`det trial download N --best|--latest|--uuid U` (Determined 0.38's)."""
    if (args.sort_by is None) != (args.smaller_is_better is None):
        raise CliError("--sort-by and --smaller-is-better go together")
    if args.sort_by is not None and not args.best:
        raise CliError("--sort-by goes with --best")
    gateway = connect(args)
    checkpoint = get_checkpoint(gateway, args.uuid) if args.uuid else _chosen_checkpoint(gateway, args)
    return save_checkpoint(gateway, checkpoint, args)


def _chosen_checkpoint(gateway: Gateway, args: argparse.Namespace) -> Any:
    """The trial's best (--best) or latest (--latest) completed checkpoint."""
    from determined.proto import api_pb2

    if args.latest:
        sort_by, order_by = "steps_completed", "desc"
    elif args.sort_by:
        sort_by, order_by = args.sort_by, "asc" if args.smaller_is_better else "desc"
    else:
        sort_by, order_by = "searcher_metric", ""
    request = api_pb2.GetTrialCheckpointsRequest(trial_id=args.trial_id, sort_by=sort_by, order_by=order_by)
    listed = gateway.call(gateway.stub.GetTrialCheckpoints, request).checkpoints
    completed = [c for c in listed if c.state == "COMPLETED"]
    if not completed:
        raise CliError(f"trial {args.trial_id} has no completed checkpoint")
    return completed[0]


def _true_or_false(text: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"{text!r} is not true or false")
    return value == "true"


def log_lines(entry: Any) -> str:
    """`[time] allocation || line` for each line of one response."""
    allocation = f"{entry.allocation_id[:8]:<8}"
    stamp = LogTimes()
    return "".join(
        f"[{stamp(line.timestamp_ns)}] {allocation} ||{_rank_tag(line)} {line.log}\n" for line in entry.lines
    )


def _rank_tag(line: Any) -> str:
    """` [rank=R]` for a line a rank of a distributed trial wrote."""
    return f" [rank={line.rank}]" if line.HasField("rank") else ""


def json_log_lines(entry: Any) -> str:
    """One JSON object per line of one response."""
    head = {"trial_id": entry.trial_id, "allocation_id": entry.allocation_id, "agent_id": entry.agent_id}
    return "".join(json.dumps({**head, "line": message_dict(line)}) + "\n" for line in entry.lines)


class LogTimes:
    """format_log_time, formatting each second once: the lines of a batch
    mostly share their second, and strftime is the costly part."""

    def __init__(self) -> None:
        self._second = -1
        self._prefix = ""

    def __call__(self, ns: int) -> str:
        second, fraction = divmod(ns, 1_000_000_000)
        if second != self._second:
            self._second, self._prefix = second, format_log_time(second * 1_000_000_000)[:-7]
        return f"{self._prefix}{fraction // 1000:06d}Z"
