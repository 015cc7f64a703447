"""`det deploy local cluster-up | cluster-down | status | restart-service |
stop-service | start-service`: a local cluster run by its supervisor
(deploy/local/supervisor.py)."""

import argparse
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from determined.cli._client import CliError
from determined.cli._output import print_json, print_table

if TYPE_CHECKING:
    from deploy.local.control import ClusterReport
    from deploy.local.status import PartStatus

PARTS_HELP = "nats-server, postgres, gateway, searcher, scheduler, checkpoint or agent"
PART_VERBS = {
    "restart-service": "restart one part (not counted as a crash); a service rebuilds its state from the event log",
    "stop-service": "stop one part and keep it stopped until start-service or cluster-up",
    "start-service": "start a stopped part now",
}
DONE = {"restart": "Restarted", "stop": "Stopped", "start": "Started"}
UP_EPILOG = """\
exit status, saying what cluster-up did:
  0  started a new cluster
  3  a cluster was already running there, every part of it: nothing done
  4  repaired a running cluster: started again the parts that were down, or, its
     supervisor gone, stopped what it left running and started every part again
  1  failed: the message names the part and shows the end of its log
"""


def add_parser(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = commands.add_parser("deploy", help="start and stop clusters")
    targets = parser.add_subparsers(dest="target", metavar="<target>")
    parser.set_defaults(run=lambda _args: parser.print_help())
    local = targets.add_parser("local", help="a cluster of processes on this machine")
    verbs = local.add_subparsers(dest="verb", metavar="<verb>")
    local.set_defaults(run=lambda _args: local.print_help())
    _add_cluster_up(verbs)

    down = verbs.add_parser("cluster-down", help="stop everything cluster-up started, trials included")
    _add_data_dir(down)
    down.set_defaults(run=cluster_down)

    status = verbs.add_parser("status", help="every part: state, pid, restarts, uptime, disk use, last error")
    _add_data_dir(status)
    status.add_argument("--json", action="store_true")
    status.set_defaults(run=show_status)

    for verb, what in PART_VERBS.items():
        command = verbs.add_parser(verb, help=what)
        command.add_argument("service", metavar="PART", help=PARTS_HELP)
        _add_data_dir(command)
        command.set_defaults(run=change_part, action=verb.split("-")[0])


def _add_cluster_up(verbs: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    up = verbs.add_parser(
        "cluster-up", help="start NATS, PostgreSQL, the services and one agent under a supervisor",
        description="Start a local cluster under its supervisor, repair one that is half down, "
                    "or say that it runs.",
        epilog=UP_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_data_dir(up)
    up.add_argument("--master-port", type=int, default=8080, help="the gateway's port (default 8080)")
    up.add_argument("--nats-port", type=int, default=4222)
    up.add_argument("--postgres-port", type=int, default=5433)
    up.add_argument("--cpu-slots", type=int, default=1,
                    help="slots the agent offers when it finds no GPU (default 1)")
    up.add_argument("--gpu", dest="gpu", action="store_true", default=True,
                    help="offer the GPUs pynvml finds (default)")
    up.add_argument("--no-gpu", dest="gpu", action="store_false", help="offer CPU slots only")
    up.add_argument("--json-logs", action="store_true", help="services log JSON lines")
    up.add_argument("--agent-name", default="", help="agent id (default: the host name)")
    up.add_argument("--fork-trials", action="store_true",
                    help="start plain `python3 script.py` trials from a warm process that has already "
                         "imported determined and grpc (and the --preload modules)")
    up.add_argument("--preload", default="", metavar="MODULES",
                    help="with --fork-trials: comma-separated modules to import once, e.g. torch,sklearn.datasets")
    up.add_argument("--docker", action="store_true", help="run the services as Docker containers")
    up.set_defaults(run=cluster_up)


def _add_data_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", type=Path, default=None,
                        help="where all the cluster's data lives "
                             "(default: $DET_DATA_DIR or ~/.local/share/determined-es)")


def _data_dir(args: argparse.Namespace) -> Path:
    from deploy.local.cluster import default_data_dir

    return Path(args.data_dir or default_data_dir()).expanduser().resolve()


def cluster_up(args: argparse.Namespace) -> int:
    from deploy.local import cluster, control
    from deploy.local.decisions import UpOutcome

    if args.docker:
        raise CliError("--docker is not available yet: the cluster runs as processes for now")
    if args.cpu_slots < 1:
        raise CliError(f"--cpu-slots must be at least 1, got {args.cpu_slots}")
    if args.preload and not args.fork_trials:
        raise CliError("--preload needs --fork-trials")
    data_dir = _data_dir(args)
    options = cluster.ClusterOptions(
        data_dir=data_dir, master_port=args.master_port, nats_port=args.nats_port,
        postgres_port=args.postgres_port, cpu_slots=args.cpu_slots, gpu=args.gpu,
        json_logs=args.json_logs, agent_id=args.agent_name, fork_trials=args.fork_trials,
        preload=args.preload,
    )
    print(f"Local cluster with its data in {data_dir} ...", flush=True)
    try:
        result = control.cluster_up(options)
    except cluster.DeployError as failure:
        raise CliError(str(failure)) from None
    record = result.record
    where = (f"master at localhost:{record.master_port}; logs in {data_dir / 'logs'}; "
             f"PostgreSQL data in {record.postgres_folder(data_dir)}")
    if result.outcome == UpOutcome.STARTED:
        print(f"Cluster is up: {where}")
    elif result.outcome == UpOutcome.REPAIRED:
        print(f"Cluster repaired: {result.done}. It is up: {where}")
    else:
        print(f"Cluster already running: {result.done} ({where})")
    return int(result.outcome)


def cluster_down(args: argparse.Namespace) -> int:
    from deploy.local import control

    data_dir = _data_dir(args)
    if not control.cluster_down(data_dir):
        print(f"No cluster is running from {data_dir}")
        return 0
    print("Cluster stopped")
    return 0


def change_part(args: argparse.Namespace) -> int:
    from deploy.local import cluster, control

    change = {"restart": control.restart_part, "stop": control.stop_part, "start": control.start_part}
    try:
        change[args.action](_data_dir(args), args.service)
    except cluster.DeployError as failure:
        raise CliError(str(failure)) from None
    print(f"{DONE[args.action]} the {args.service} service")
    return 0


def show_status(args: argparse.Namespace) -> int:
    from deploy.local import cluster, control

    try:
        report = control.cluster_report(_data_dir(args))
    except cluster.DeployError as failure:
        raise CliError(str(failure)) from None
    if args.json:
        print_json(status_json(report))
        return 0
    print(status_heading(report))
    now = time.time()
    parts = report.status.parts if report.status else ()
    print_table(["Part", "State", "PID", "Restarts", "Uptime", "Disk", "Last error"],
                [part_row(part, now) for part in parts])
    return 0


def status_json(report: "ClusterReport") -> dict[str, Any]:
    document: dict[str, Any] = report.status.to_json() if report.status else {"parts": []}
    return dict(document, data_dir=str(report.data_dir), supervisor_alive=report.supervisor_alive,
                master_port=report.record.master_port,
                postgres_data_dir=str(report.record.postgres_folder(report.data_dir)))


def status_heading(report: "ClusterReport") -> str:
    where = (f"Cluster in {report.data_dir}: master at localhost:{report.record.master_port}; "
             f"PostgreSQL data in {report.record.postgres_folder(report.data_dir)}")
    if report.supervisor_alive:
        return f"{where}\nSupervisor pid {report.record.supervisor_pid}"
    return (f"{where}\nIts supervisor is not running: the parts are as it last recorded them. "
            "Repair with: det deploy local cluster-up")


def part_row(part: "PartStatus", now: float) -> list[Any]:
    up = part.state in ("running", "starting") and part.started_at > 0
    error = part.last_error.splitlines()[0] if part.last_error else ""
    return [part.name, part.state, part.pid or "", part.restarts,
            format_duration(now - part.started_at) if up else "", format_bytes(part.disk_bytes), error]


def format_duration(seconds: float) -> str:
    minutes, second = divmod(int(seconds), 60)
    hours, minute = divmod(minutes, 60)
    days, hour = divmod(hours, 24)
    if days:
        return f"{days}d {hour}h"
    if hours:
        return f"{hours}h {minute}m"
    return f"{minute}m {second}s" if minute else f"{second}s"


def format_bytes(count: int) -> str:
    if count < 1024:
        return f"{count} B"
    size = count / 1024
    for unit in ("KiB", "MiB"):
        if size < 1024:
            return f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"
