"""`det master info`: the master's version and cluster id, and every part of
the cluster as its supervisor last recorded it (a local cluster's); `det
master logs`: the master's own recent log lines; `det version`."""

import argparse
import sys
import time
from typing import Any

from determined.cli._client import connect
from determined.cli._log_filters import line_count
from determined.cli._output import message_dict, print_json, print_table


def add_parser(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    master = commands.add_parser("master", help="the master")
    verbs = master.add_subparsers(dest="verb", metavar="<verb>")
    master.set_defaults(run=lambda _args: master.print_help())
    info = verbs.add_parser("info", help="version, cluster id and the state of every part of the cluster")
    output = info.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true")
    output.add_argument("--yaml", action="store_true")
    info.set_defaults(run=show_info)
    logs = verbs.add_parser("logs", help="the master's own recent log lines (an admin's only)")
    logs.add_argument("-f", "--follow", action="store_true", help="keep streaming new lines")
    logs.add_argument("--tail", type=line_count, metavar="K", help="only the last K lines")
    logs.set_defaults(run=show_logs)

    version = commands.add_parser("version", help="the versions of this client and of the master")
    version.set_defaults(run=show_version)


def show_info(args: argparse.Namespace) -> int:
    from determined.proto import api_pb2

    gateway = connect(args)
    answer = gateway.call(gateway.stub.GetMaster, api_pb2.GetMasterRequest())
    if args.json:
        print_json(message_dict(answer))
        return 0
    if args.yaml:
        print_yaml(message_dict(answer))
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


def show_logs(args: argparse.Namespace) -> int:
    from determined.proto import api_pb2

    gateway = connect(args)
    request = api_pb2.MasterLogsRequest(follow=args.follow, tail=args.tail or 0)
    for response in gateway.stream(gateway.stub.MasterLogs, request):
        sys.stdout.write("".join(entry.message + "\n" for entry in response.entries))
        sys.stdout.flush()
    return 0


def show_version(args: argparse.Namespace) -> int:
    """As Determined 0.38's `det version`: the client's version, the master's
    (empty when it does not answer), and the master's address, as YAML."""
    from determined import __version__
    from determined.cli._client import MasterUnavailableError
    from determined.proto import api_pb2

    gateway = connect(args)
    master = {"cluster_id": "", "cluster_name": "", "version": ""}
    try:
        answer = gateway.call(gateway.stub.GetMaster, api_pb2.GetMasterRequest())
        master = {
            "cluster_id": answer.cluster_id,
            "cluster_name": answer.cluster_name,
            "version": answer.version,
        }
    except MasterUnavailableError as error:
        print(f"The master at {gateway.address} did not answer: {error}", file=sys.stderr)
    print_yaml({"client": {"version": __version__}, "master": master, "master_address": gateway.address})
    return 0


def print_yaml(value: Any) -> None:
    import yaml

    print(yaml.safe_dump(value, default_flow_style=False, sort_keys=False), end="")
