"""`det events`: the event log as people read it, through the gateway with the
user's login: one line per event (when, sequence, aggregate, type, who
appended it, what happened and why, which event it answers). Admins read
every event; other users those of their own experiments and tasks, and
their own actions. The filters run on the gateway."""

import argparse
import re
import sys
import time
from datetime import UTC, datetime
from typing import Any

from determined.cli import _args, _events_explain, _events_export, _events_simulate
from determined.cli._client import connect

# "30m", "2h", "1d": that long ago.
RELATIVE = re.compile(r"^\s*(\d+)\s*([smhd])\s*$")
SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
# `--tail` without `--limit`: this many of the newest.
TAIL_EVENTS = 20
# A causation id shown in place of a sequence the answer did not include is cut to this.
SHORT_CAUSE = 24


def add_parser(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = commands.add_parser(
        "events",
        help="read the event log: who did what, when and why",
        description="The events that match, one line each, oldest first: time, sequence, aggregate,"
        " type, actor, what happened (and why), '<- #S' for the event it answers.",
    )
    add_filter_arguments(parser)
    parser.add_argument("--limit", type=_args.count, default=0, metavar="N", help="at most N events")
    parser.add_argument(
        "--tail", action="store_true", help=f"the newest events (--limit of them, else {TAIL_EVENTS})"
    )
    parser.add_argument("-f", "--follow", action="store_true", help="then each new event, until Ctrl-C")
    parser.add_argument("--json", action="store_true", help="one LoggedEvent per line, protobuf's JSON form")
    parser.set_defaults(run=show_events)
    verbs = parser.add_subparsers(dest="verb", metavar="<verb>")
    _events_explain.add_explain_parser(verbs)
    _events_export.add_export_parser(verbs)
    _events_simulate.add_simulate_parser(verbs)


def add_filter_arguments(parser: argparse.ArgumentParser) -> None:
    """The filters of GetEvents (`event_filter` reads them back)."""
    parser.add_argument(
        "--experiment", type=_args.EXPERIMENT_ID, metavar="N", help="its events and its trials'"
    )
    parser.add_argument(
        "--trial", type=_args.TRIAL_ID, metavar="N", help="its events, its runs' and checkpoints'"
    )
    parser.add_argument("--allocation", metavar="ID", default="", help="one allocation's events (7.1)")
    parser.add_argument(
        "--task", metavar="ID", default="", help="a notebook's, TensorBoard's, command's or shell's"
    )
    # Not `user`: that is det's own -u (who acts), which a subcommand's default would replace.
    parser.add_argument("--user", dest="actor_user", metavar="U", default="", help="only what user U did")
    parser.add_argument(
        "--type",
        action="append",
        default=[],
        metavar="T",
        help="only events of this type: trial_stop_requested or TrialStopRequested (repeat or comma separate)",
    )
    parser.add_argument(
        "--since", type=moment_ns, metavar="TIME", help="from TIME: ISO 8601 (UTC), or 30m, 2h, 1d ago"
    )
    parser.add_argument("--until", type=moment_ns, metavar="TIME", help="up to TIME (as --since)")
    parser.add_argument("--from-seq", type=_args.sequence, default=0, metavar="S", help="from sequence S")


def moment_ns(text: str) -> int:
    """--since/--until: that long ago ("30m", "2h", "1d"), else a time as _args.time_ns reads it."""
    relative = RELATIVE.match(text)
    if relative is None:
        return _args.time_ns(text)
    amount, unit = relative.groups()
    return time.time_ns() - int(amount) * SECONDS[unit] * 10**9


def event_filter(args: argparse.Namespace) -> Any:
    """The EventFilter of the parsed `add_filter_arguments`."""
    from determined.proto import api_pb2

    return api_pb2.EventFilter(
        experiment_id=args.experiment or 0,
        trial_id=args.trial or 0,
        allocation_id=args.allocation,
        task_id=args.task,
        user=args.actor_user,
        types=[name.strip() for names in args.type for name in names.split(",") if name.strip()],
        since_ns=args.since or 0,
        until_ns=args.until or 0,
        from_sequence=args.from_seq,
    )


def show_events(args: argparse.Namespace) -> int:
    from determined.proto import api_pb2

    limit = args.limit or (TAIL_EVENTS if args.tail else 0)
    request = api_pb2.GetEventsRequest(
        filter=event_filter(args), follow=args.follow, limit=limit, tail=args.tail
    )
    gateway = connect(args)
    out = sys.stdout
    for response in gateway.stream(gateway.stub.GetEvents, request):
        out.write(
            "".join(
                (json_line(event) if args.json else event_line(event)) + "\n" for event in response.events
            )
        )
        out.flush()
    return 0


def event_line(event: Any) -> str:
    """time  #sequence  aggregate  type  actor  summary[: reason]  [<- #cause]"""
    what = f"{event.summary}: {event.reason}" if event.reason else event.summary
    cause = (
        f"  <- #{event.causation_sequence}"
        if event.causation_sequence
        else f"  <- {event.causation_id[:SHORT_CAUSE]}"
        if event.causation_id
        else ""
    )
    return (
        f"{local_time(event.occurred_at_ns)}  #{event.sequence:<7} {event.aggregate:<16} "
        f"{event.type or '(unreadable)':<28} {event.actor:<18} {what}{cause}"
    )


def json_line(event: Any) -> str:
    from google.protobuf import json_format

    return str(json_format.MessageToJson(event, indent=None))


def local_time(ns: int) -> str:
    """ISO 8601 in the local zone, to the millisecond: 2026-11-22T04:00:00.123+01:00."""
    if not ns:
        return " " * 29
    second, fraction = divmod(ns, 1_000_000_000)
    moment = datetime.fromtimestamp(second, UTC).astimezone().replace(microsecond=fraction // 1000)
    return moment.isoformat(timespec="milliseconds")
