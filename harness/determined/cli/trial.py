"""`det trial` (`det t`): describe or kill a trial, show or follow its logs."""

import argparse
import json
import sys
from typing import Any

from determined.cli._args import TRIAL_ID, rank
from determined.cli._client import Gateway, connect
from determined.cli._output import (
    compact_json,
    format_log_time,
    format_time,
    message_dict,
    print_json,
    print_table,
)
from determined.cli.checkpoint import add_listing_arguments, list_trial_checkpoints
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
    logs.add_argument("-f", "--follow", action="store_true", help="keep streaming until the trial ends")
    logs.add_argument("--json", action="store_true", help="one JSON object per line")
    logs.add_argument(
        "--rank", type=rank, metavar="R", help="only the lines this rank of a distributed trial wrote"
    )
    logs.set_defaults(run=show_logs)

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
    follow_logs(connect(args), args.trial_id, follow=args.follow, as_json=args.json, rank=args.rank)
    return 0


def follow_logs(
    gateway: Gateway, trial_id: int, *, follow: bool, as_json: bool = False, rank: int | None = None
) -> None:
    """Writes each response's lines at once and flushes once per response:
    a response holds up to a stored batch (hundreds of lines)."""
    from determined.proto import api_pb2

    request = api_pb2.TrialLogsRequest(trial_id=trial_id, follow=follow, rank=rank)
    out = sys.stdout
    for entry in gateway.stream(gateway.stub.TrialLogs, request):
        out.write(json_log_lines(entry) if as_json else log_lines(entry))
        out.flush()


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
