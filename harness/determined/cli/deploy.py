"""`det deploy local cluster-up | cluster-down`."""

import argparse
from pathlib import Path

from determined.cli._client import CliError


def add_parser(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = commands.add_parser("deploy", help="start and stop clusters")
    targets = parser.add_subparsers(dest="target", metavar="<target>")
    parser.set_defaults(run=lambda _args: parser.print_help())
    local = targets.add_parser("local", help="a cluster of processes on this machine")
    verbs = local.add_subparsers(dest="verb", metavar="<verb>")
    local.set_defaults(run=lambda _args: local.print_help())

    up = verbs.add_parser("cluster-up", help="start NATS, PostgreSQL, the services and one agent")
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

    down = verbs.add_parser("cluster-down", help="stop everything cluster-up started")
    _add_data_dir(down)
    down.set_defaults(run=cluster_down)

    restart = verbs.add_parser(
        "restart-service", help="restart one service; it rebuilds its state from the event log"
    )
    restart.add_argument("service", help="gateway, searcher, scheduler, checkpoint or agent")
    _add_data_dir(restart)
    restart.set_defaults(run=restart_service)


def _add_data_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", type=Path, default=None,
                        help="where all the cluster's data lives "
                             "(default: $DET_DATA_DIR or ~/.local/share/determined-es)")


def cluster_up(args: argparse.Namespace) -> int:
    from deploy.local import cluster

    if args.docker:
        raise CliError("--docker is not available yet: the cluster runs as processes for now")
    if args.cpu_slots < 1:
        raise CliError(f"--cpu-slots must be at least 1, got {args.cpu_slots}")
    if args.preload and not args.fork_trials:
        raise CliError("--preload needs --fork-trials")
    data_dir = args.data_dir or cluster.default_data_dir()
    options = cluster.ClusterOptions(
        data_dir=data_dir, master_port=args.master_port, nats_port=args.nats_port,
        postgres_port=args.postgres_port, cpu_slots=args.cpu_slots, gpu=args.gpu,
        json_logs=args.json_logs, agent_id=args.agent_name, fork_trials=args.fork_trials,
        preload=args.preload,
    )
    print(f"Starting a local cluster with its data in {data_dir.expanduser().resolve()} ...", flush=True)
    try:
        cluster.cluster_up(options)
    except cluster.AlreadyRunningError as running:
        print(running)
        return 0
    except cluster.DeployError as failure:
        raise CliError(str(failure)) from None
    logs = data_dir.expanduser().resolve() / "logs"
    print(f"Cluster is up: master at localhost:{args.master_port}; service logs in {logs}")
    return 0


def cluster_down(args: argparse.Namespace) -> int:
    from deploy.local import cluster

    data_dir = args.data_dir or cluster.default_data_dir()
    if not cluster.cluster_down(data_dir):
        print(f"No cluster is running from {data_dir}")
        return 0
    print("Cluster stopped")
    return 0


def restart_service(args: argparse.Namespace) -> int:
    from deploy.local import cluster

    data_dir = args.data_dir or cluster.default_data_dir()
    try:
        cluster.restart_service(data_dir, args.service)
    except cluster.DeployError as failure:
        raise CliError(str(failure)) from None
    print(f"Restarted the {args.service} service")
    return 0
