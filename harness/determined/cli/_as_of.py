"""`--at TIME | --at-seq S`: the cluster as it was at that point of the event
log (det experiment describe and list-trials, det job list, det agent list).
The gateway folds the log up to there; the output is the live command's,
after a first line naming the point."""

import argparse
from typing import Any

from determined.cli import _args
from determined.cli._output import format_time


def add_as_of_arguments(parser: argparse.ArgumentParser) -> None:
    point = parser.add_mutually_exclusive_group()
    point.add_argument(
        "--at",
        type=_args.time_ns,
        metavar="TIME",
        help="as it was at this time (ISO 8601; UTC unless it names a zone), from the event log",
    )
    point.add_argument(
        "--at-seq",
        type=_args.sequence,
        metavar="S",
        help="as it was once the event log's sequence S was applied",
    )


def as_of(args: argparse.Namespace) -> Any:
    """The request's AsOf (empty: as it is now)."""
    from determined.proto import api_pb2

    return api_pb2.AsOf(sequence=args.at_seq or 0, time_ns=args.at or 0)


def print_as_of(response: Any) -> None:
    """The first line of an answer as it was: which point of the log it is."""
    if response.HasField("as_of"):
        point = response.as_of
        print(
            f"As of sequence {point.sequence}" + (f" ({format_time(point.time_ns)})" if point.time_ns else "")
        )
