"""`det master info`: the master's version and cluster id, and every part of
the cluster as its supervisor last recorded it (a local cluster's)."""

import argparse
import time
from typing import Any

from determined.cli._client import connect
from determined.cli._output import message_dict, print_json, print_table


def add_parser(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    master = commands.add_parser("master", help="the master")
    verbs = master.add_subparsers(dest="verb", metavar="<verb>")
    master.set_defaults(run=lambda _args: master.print_help())
    info = verbs.add_parser("info", help="version, cluster id and the state of every part of the cluster")
    info.add_argument("--json", action="store_true")
    info.set_defaults(run=show_info)


def show_info(args: argparse.Namespace) -> int:
    from determined.proto import api_pb2

    gateway = connect(args)
    answer = gateway.call(gateway.stub.GetMaster, api_pb2.GetMasterRequest())
    if args.json:
        print_json(message_dict(answer))
        return 0
    print(f"Version: {answer.version}\nCluster id: {answer.cluster_id}\nCluster name: {answer.cluster_name}")
    if not answer.parts:
        print("Parts: not known (the master runs without a supervisor)")
        return 0
    print_table(
        ["Part", "State", "PID", "Restarts", "Uptime", "Last error"],
        [_row(part, time.time()) for part in answer.parts],
    )
    return 0


def _row(part: Any, now: float) -> list[Any]:
    from determined.cli.deploy import format_duration

    up = part.state in ("running", "starting") and part.started_at_ns > 0
    error = part.last_error.splitlines()[0] if part.last_error else ""
    return [
        part.name,
        part.state,
        part.pid or "",
        part.restarts,
        format_duration(now - part.started_at_ns / 1e9) if up else "",
        error,
    ]
