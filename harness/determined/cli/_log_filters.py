"""The flags that choose which log lines to show, as Determined 0.38's
`det trial logs` takes them: defined once here, for every verb that shows a
trial's logs (`det trial logs`, `det experiment logs`)."""

import argparse
from typing import Any

from determined.cli._args import rank, time_ns
from determined.cli._client import CliError

# Determined's log levels, lowest first: `--level L` shows L and the levels above it.
LEVELS = ("TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
MAX_FILTER_VALUES = 100


def add_log_filter_args(parser: argparse.ArgumentParser) -> None:
    """-f, --head/--tail, --agent-id, --container-id, --rank-id (--rank),
    --timestamp-before/--timestamp-after, --level, --source, --stdtype, --json."""
    parser.add_argument("-f", "--follow", action="store_true", help="keep streaming until the trial ends")
    count = parser.add_mutually_exclusive_group()
    count.add_argument("--head", type=line_count, metavar="K", help="only the first K lines")
    count.add_argument(
        "--tail", type=line_count, metavar="K", help="only the last K lines (with -f, then the new ones)"
    )
    parser.add_argument(
        "--agent-id",
        dest="agent_ids",
        action="append",
        metavar="AGENT",
        help="only this agent's lines (repeat)",
    )
    parser.add_argument(
        "--container-id",
        dest="container_ids",
        action="append",
        metavar="ID",
        help="only this container's lines (here: an allocation's id; repeat)",
    )
    parser.add_argument(
        "--rank-id",
        "--rank",
        dest="rank_ids",
        type=rank,
        action="append",
        metavar="R",
        help="only the lines this rank of a distributed trial wrote (repeat)",
    )
    parser.add_argument(
        "--timestamp-before", type=time_ns, metavar="T", help="only lines written before T (ISO 8601, UTC)"
    )
    parser.add_argument(
        "--timestamp-after", type=time_ns, metavar="T", help="only lines written after T (ISO 8601, UTC)"
    )
    parser.add_argument(
        "--level",
        type=str.upper,
        choices=LEVELS,
        help="only lines of this level or above (the level a line starts with, as in 'INFO: ...')",
    )
    parser.add_argument(
        "--source",
        dest="sources",
        action="append",
        choices=("container", "agent", "master"),
        help="only lines from this source: the trial's own output or the agent's notes (repeat)",
    )
    parser.add_argument(
        "--stdtype",
        dest="stdtypes",
        action="append",
        choices=("stdout", "stderr"),
        help="stdout or stderr (repeat)",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per line")


def levels_at_or_above(level: str | None) -> list[str]:
    """The levels a `--level` keeps (none: every line, leveled or not)."""
    return [] if level is None else list(LEVELS[LEVELS.index(level) :])


def log_request(args: argparse.Namespace, trial_id: int) -> Any:
    """The TrialLogsRequest the flags ask for."""
    from determined.proto import api_pb2

    for name in ("agent_ids", "container_ids", "rank_ids", "sources", "stdtypes"):
        if len(getattr(args, name) or []) > MAX_FILTER_VALUES:
            raise CliError(f"at most {MAX_FILTER_VALUES} values of --{name[:-1].replace('_', '-')}")
    return api_pb2.TrialLogsRequest(
        trial_id=trial_id,
        follow=args.follow,
        limit=args.head or args.tail or 0,
        tail=args.tail is not None,
        agent_ids=args.agent_ids or [],
        container_ids=args.container_ids or [],
        rank_ids=args.rank_ids or [],
        levels=levels_at_or_above(args.level),
        stdtypes=args.stdtypes or [],
        sources=args.sources or [],
        timestamp_before_ns=args.timestamp_before or 0,
        timestamp_after_ns=args.timestamp_after or 0,
    )


def line_count(text: str) -> int:
    """A number of lines to show: 1 or more."""
    try:
        value = int(text.strip(), 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of lines (a whole number)") from None
    if not 0 < value < 2**31:
        raise argparse.ArgumentTypeError(f"{text} is not a number of lines: 1 or more")
    return value
