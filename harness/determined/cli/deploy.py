"""`det deploy local cluster-up | cluster-down | status | restart-service |
stop-service | start-service | agent-up | agent-down | agent-credentials |
build-images | verify | replay`: a local cluster run by its supervisor (deploy/local/supervisor.py);
replay (_deploy_replay.py) starts a read-only one over a bundle of exported events.

Agents: cluster-up --agents 1 runs the part "agent" (agent id: --agent-name or
the host name); --agents N > 1 runs parts agent-1 .. agent-N with agent ids
agent-1 .. agent-N (<agent-name>-1 .. with --agent-name). agent-up adds one
(agent id --agent-id or the first free agent-<n>; part agent-<id>, or the id
itself when it starts with agent-); with --master-host it runs an agent for a
cluster on another machine, under a supervisor of its own in its own data folder,
with the secret file agent-credentials made for it on the cluster's machine (its
own nats-server user: an agent appends only as itself).

Users: a new cluster's built-in users admin and determined get the password
--initial-user-password, else one cluster-up generates and shows once; then
cluster-up logs whoever ran it in as admin (a token in their CLI cache). The
master listens on 127.0.0.1 unless --listen says otherwise; with --tls-cert and
--tls-key it serves TLS (deploy/local/tls.py), and warns when it listens beyond
loopback without.

Docker: build-images builds the cluster and trial images (deploy/docker/);
cluster-up --docker runs the same cluster under Docker Compose (deploy/compose/),
whose agent runs trials in containers; cluster-down --docker and status act on it.
cluster-up --runtime docker makes a process cluster's agents run trials in containers.
"""

import argparse
import math
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from determined.cli._client import CliError
from determined.cli._output import print_json, print_table

if TYPE_CHECKING:
    from deploy.local.cluster import ClusterOptions, ClusterRecord
    from deploy.local.control import ClusterReport, UpResult
    from deploy.local.status import PartStatus

PARTS_HELP = "nats-server, postgres, gateway, searcher, scheduler, checkpoint, or an agent's part (agent, agent-1, ...)"
SCHEDULERS = ("fair_share", "priority")
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
    down.add_argument(
        "--docker", action="store_true", help="the cluster cluster-up --docker started (its volumes are kept)"
    )
    down.set_defaults(run=cluster_down)

    build = verbs.add_parser(
        "build-images", help="build the cluster image and the trial images (deploy/docker/) from this package"
    )
    build.add_argument(
        "--work-dir",
        type=Path,
        default=None,
        help="where the wheels and build folders are kept between builds (default: $XDG_CACHE_HOME or "
        "~/.cache, determined-es/images)",
    )
    build.add_argument(
        "--only",
        action="append",
        choices=("cluster", "cpu", "cuda"),
        default=None,
        help="build only these (repeatable)",
    )
    build.set_defaults(run=build_images)

    status = verbs.add_parser("status", help="every part: state, pid, restarts, uptime, disk use, last error")
    _add_data_dir(status)
    status.add_argument("--json", action="store_true")
    status.set_defaults(run=show_status)

    for verb, what in PART_VERBS.items():
        command = verbs.add_parser(verb, help=what)
        command.add_argument("service", metavar="PART", help=PARTS_HELP)
        _add_data_dir(command)
        command.set_defaults(run=change_part, action=verb.split("-")[0])
    _add_agent_verbs(verbs)
    _add_verify(verbs)
    from determined.cli._deploy_replay import add_replay_parser  # it imports this module

    add_replay_parser(verbs)
    from determined.cli._deploy_logs import add_logs_parser

    add_logs_parser(verbs)


def _add_agent_verbs(verbs: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    up = verbs.add_parser(
        "agent-up",
        help="add an agent to this machine's cluster, or (--master-host) to a cluster elsewhere",
        description="Add an agent. Without --master-host, to the cluster running from --data-dir. With "
        "--master-host, an agent for the cluster whose master (gateway) is there: it asks the "
        "master where NATS is and runs under a supervisor of its own in --data-dir (default "
        "~/.local/share/determined-es-agent); it needs the cluster's secret (--secret-file).",
    )
    _add_data_dir(up)
    up.add_argument(
        "--agent-id",
        default="",
        type=_agent_id,
        help="default: the first free agent-<n> (with --master-host: the host name)",
    )
    up.add_argument(
        "--cpu-slots", type=_positive, default=1, help="slots it offers when it finds no GPU (default 1)"
    )
    up.add_argument("--pool", default="", help="its resource pool (default: default)")
    up.add_argument(
        "--master-host",
        default="",
        help="the host of a cluster's master on another machine (https://HOST when it serves TLS; "
        "with a certificate the system's CAs do not vouch for, set DET_MASTER_CERT_FILE instead)",
    )
    up.add_argument("--master-port", type=_port, default=8080, help="that master's port (default 8080)")
    up.add_argument(
        "--secret-file",
        type=Path,
        default=None,
        help="with --master-host: a copy of the agent's secret file, which det deploy local "
        "agent-credentials makes on the cluster's machine (it names the agent's id)",
    )
    up.add_argument(
        "--advertise-host",
        default="",
        metavar="HOST",
        help="with --master-host: the address the cluster's other machines reach this one by "
        "(for multi-agent trials; default: its host name)",
    )
    up.add_argument("--no-gpu", dest="gpu", action="store_false", default=True, help="offer CPU slots only")
    up.set_defaults(run=agent_up)

    secret = verbs.add_parser(
        "agent-credentials",
        help="make the secret file an agent on another machine runs with",
        description="Give an agent that runs on another machine (agent-up --master-host) its own nats-server "
        "user, let in at once, and write the file its operator copies there: "
        "<data dir>/agent-secrets/<agent id>.secret. It lets that agent append only as itself.",
    )
    _add_data_dir(secret)
    secret.add_argument("--agent-id", required=True, type=_agent_id, help="the id the agent will run with")
    secret.add_argument(
        "--revoke",
        action="store_true",
        help="instead: remove that agent's user (its connections are closed) and its file",
    )
    secret.set_defaults(run=agent_credentials)

    down = verbs.add_parser("agent-down", help="stop an agent and remove it (its trials run again elsewhere)")
    _add_data_dir(down)
    down.add_argument("--agent-id", default="", help="its agent id or part (default: the agent added last)")
    down.add_argument(
        "--remote", action="store_true", help="an agent started with --master-host (its default data folder)"
    )
    down.set_defaults(run=agent_down)


def _add_verify(verbs: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    verify = verbs.add_parser(
        "verify",
        help="check the read models against a rebuild from the event log, leaving them as they are",
        description="Rebuilds the read models from the event log beside the live ones (up to the live"
        " projector's position) and reports every row that differs. Exit status: 0 none differs,"
        " 1 some do, 2 it could not check.",
    )
    _add_data_dir(verify)
    verify.add_argument(
        "--max-differences",
        type=_positive,
        metavar="N",
        default=None,
        help="the differing rows shown per table (default 20; the others are counted)",
    )
    verify.set_defaults(run=verify_read_models)


def _add_cluster_up(verbs: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    up = verbs.add_parser(
        "cluster-up",
        help="start NATS, PostgreSQL, the services and one agent under a supervisor",
        description="Start a local cluster under its supervisor, repair one that is half down, "
        "or say that it runs.",
        epilog=UP_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_data_dir(up)
    up.add_argument("--master-port", type=int, default=8080, help="the gateway's port (default 8080)")
    up.add_argument("--nats-port", type=int, default=4222)
    up.add_argument("--postgres-port", type=int, default=5433)
    up.add_argument(
        "--cpu-slots", type=int, default=1, help="slots each agent offers when it finds no GPU (default 1)"
    )
    up.add_argument(
        "--agents",
        type=_positive,
        default=1,
        help="agents to run (default 1: the part 'agent'; N > 1: parts and ids agent-1 .. agent-N)",
    )
    up.add_argument(
        "--advertise-host",
        default="",
        metavar="HOST",
        help="the address agents on other machines reach this one by: NATS then listens on every "
        "interface and the master hands out nats://HOST:<nats port> (their trials reach the "
        "master too: add --listen)",
    )
    up.add_argument(
        "--scheduler",
        choices=SCHEDULERS,
        default=None,
        help="how every pool shares its slots (default fair_share; DET_SCHEDULER_TYPE)",
    )
    up.add_argument(
        "--pool-scheduler",
        action="append",
        default=[],
        type=_pool_scheduler,
        metavar="POOL=TYPE",
        help="the scheduler of one pool, e.g. gpu=priority (repeatable; DET_SCHEDULER_POOL_TYPES)",
    )
    up.add_argument(
        "--agent-lost-s",
        type=_positive_float,
        default=None,
        metavar="S",
        help="an agent with no heartbeat this long is lost (default 10; DET_AGENT_LOST_S)",
    )
    up.add_argument(
        "--min-run-s",
        type=_non_negative_float,
        default=None,
        metavar="S",
        help="the least a trial runs before it can be preempted (default 30; DET_SCHEDULER_MIN_RUN_S)",
    )
    up.add_argument(
        "--gpu", dest="gpu", action="store_true", default=True, help="offer the GPUs pynvml finds (default)"
    )
    up.add_argument("--no-gpu", dest="gpu", action="store_false", help="offer CPU slots only")
    up.add_argument("--json-logs", action="store_true", help="services log JSON lines")
    up.add_argument(
        "--agent-name",
        default="",
        type=_agent_id,
        help="agent id (default: the host name; with --agents N: the prefix of <name>-1 .. <name>-N)",
    )
    up.add_argument(
        "--fork-trials",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="start plain `python3 script.py` trials from a warm process that has already "
        "imported determined and grpc (and the --preload modules); on by default",
    )
    up.add_argument(
        "--preload",
        default="",
        metavar="MODULES",
        help="with --fork-trials: comma-separated modules to import once, e.g. torch,sklearn.datasets",
    )
    up.add_argument(
        "--checkpoint-storage",
        type=Path,
        default=None,
        metavar="FILE.yaml",
        help="the cluster's default checkpoint_storage section (YAML, e.g. type: s3, bucket: ...); "
        "an experiment's own section overrides it (default: shared_fs in <data dir>/checkpoints)",
    )
    up.add_argument(
        "--docker",
        action="store_true",
        help="run NATS, PostgreSQL, the services and the agent as Docker containers under Docker Compose "
        "(deploy/compose/; the images from build-images)",
    )
    up.add_argument(
        "--runtime",
        choices=("docker", "process"),
        default=None,
        help="how the agents run trials: as containers or as processes (default: docker with --docker, "
        "else process; DET_AGENT_RUNTIME)",
    )
    up.add_argument(
        "--initial-user-password",
        default=None,
        metavar="PASSWORD",
        help="the password of the built-in users admin and determined on a new cluster "
        "(default: one generated and shown once)",
    )
    up.add_argument(
        "--allow-blank-password",
        action="store_true",
        help="allow a blank initial password: without --initial-user-password, the built-in users "
        "then have no password",
    )
    up.add_argument(
        "--listen",
        default="127.0.0.1",
        metavar="ADDR",
        help="the address the master listens on (default 127.0.0.1: this machine only; 0.0.0.0: "
        "every network, e.g. for agents on other machines); without --tls-cert, calls and "
        "passwords then cross the network in clear",
    )
    up.add_argument(
        "--tls-cert",
        type=Path,
        default=None,
        metavar="CERT.pem",
        help="serve the master's gRPC and HTTP ports (and NATS's, for agents on other machines) with "
        "TLS, with this PEM certificate (chain); needs --tls-key",
    )
    up.add_argument(
        "--tls-key",
        type=Path,
        default=None,
        metavar="KEY.pem",
        help="the certificate's PEM private key (with --tls-cert)",
    )
    up.set_defaults(run=cluster_up)


def _add_data_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="where all the cluster's data lives (default: $DET_DATA_DIR or ~/.local/share/determined-es)",
    )


def _data_dir(args: argparse.Namespace) -> Path:
    from deploy.local.cluster import default_data_dir

    return Path(args.data_dir or default_data_dir()).expanduser().resolve()


def cluster_up(args: argparse.Namespace) -> int:
    from deploy.local import cluster, control

    if args.cpu_slots < 1:
        raise CliError(f"--cpu-slots must be at least 1, got {args.cpu_slots}")
    if args.preload and not args.fork_trials:
        raise CliError("--preload needs --fork-trials")
    if args.initial_user_password == "" and not args.allow_blank_password:
        raise CliError("a blank --initial-user-password needs --allow-blank-password")
    _warn_if_in_clear(args)
    data_dir = _data_dir(args)
    settings = scheduler_settings(args)
    if args.allow_blank_password:
        settings["DET_ALLOW_BLANK_PASSWORD"] = "1"
    if args.runtime and not args.docker:
        settings["DET_AGENT_RUNTIME"] = args.runtime
    options = cluster.ClusterOptions(
        data_dir=data_dir,
        master_port=args.master_port,
        nats_port=args.nats_port,
        postgres_port=args.postgres_port,
        cpu_slots=args.cpu_slots,
        gpu=args.gpu,
        json_logs=args.json_logs,
        agent_id=args.agent_name,
        fork_trials=args.fork_trials,
        preload=args.preload,
        agents=args.agents,
        advertise_host=args.advertise_host,
        settings=settings,
        listen=args.listen,
        tls_cert=_absolute(args.tls_cert),
        tls_key=_absolute(args.tls_key),
    )
    print(f"Local cluster with its data in {data_dir} ...", flush=True)
    if args.docker:
        return _compose_cluster_up(args, options)
    try:
        control.check_tls(options)
        _keep_initial_password(args, data_dir)
        result = control.cluster_up(options)
    except cluster.DeployError as failure:
        raise CliError(str(failure)) from None
    master = _announce(result, data_dir, options.settings)
    _log_in_operator(data_dir, master, _certificate_environment(result.record))
    return int(result.outcome)


def _compose_cluster_up(args: argparse.Namespace, options: "ClusterOptions") -> int:
    """cluster-up --docker: the same cluster under Docker Compose (deploy/compose/)."""
    from deploy.compose import cluster as compose
    from deploy.docker.images import image_name
    from deploy.local import cluster, control
    from deploy.local.decisions import UpOutcome

    try:
        control.check_tls(options)
        _keep_initial_password(args, options.data_dir)
        record = compose.cluster_up(options, image_name("cluster"), args.runtime or "docker")
    except cluster.DeployError as failure:
        raise CliError(str(failure)) from None
    result = control.UpResult(UpOutcome.STARTED, "", record)
    master = _announce(result, options.data_dir, options.settings, compose.logs_hint(options.data_dir))
    _log_in_operator(options.data_dir, master, _certificate_environment(record))
    return int(result.outcome)


def build_images(args: argparse.Namespace) -> int:
    from deploy.docker import images

    work = args.work_dir or images.default_work_dir()
    try:
        built = images.build_images(
            work.expanduser().resolve(), tuple(args.only or ("cluster", "cpu", "cuda"))
        )
    except images.BuildError as failure:
        raise CliError(str(failure)) from None
    print_table(
        ["Image", "Size"],
        [
            [image.name, f"skipped: {image.skipped}" if image.skipped else format_bytes(image.size_bytes)]
            for image in built
        ],
    )
    return 0


def _announce(result: "UpResult", data_dir: Path, settings: dict[str, str], logs: str = "") -> str:
    """Says what cluster-up did and where the cluster is; returns the master's address
    (https://host:port with TLS: that tells the CLI to use it, see determined._client)."""
    from deploy.local.cluster import http_port, proxy_port
    from deploy.local.decisions import UpOutcome

    record = result.record
    master = record.master_address()
    scheme_host = f"{'https' if record.tls_cert else 'http'}://{record.master_host()}"
    web = f"{scheme_host}:{http_port(record.master_port, settings)}"
    addresses = (
        f"master at {master}; HTTP API at {web}; tasks' pages at "
        f"{scheme_host}:{proxy_port(record.master_port, settings)}"
    )
    where = (
        f"{addresses}; logs in {data_dir / 'logs'}; PostgreSQL data in {record.postgres_folder(data_dir)}"
        if not logs
        else f"{addresses}; {logs}"
    )
    if result.outcome == UpOutcome.STARTED:
        print(f"Cluster is up: {where}")
    elif result.outcome == UpOutcome.REPAIRED:
        print(f"Cluster repaired: {result.done}. It is up: {where}")
    else:
        print(f"Cluster already running: {result.done} ({where})")
    if record.tls_cert:
        variables = "".join(f" {name}={value}" for name, value in _certificate_environment(record).items())
        print(f"The master serves TLS: the CLI reaches it with DET_MASTER={master}{variables}")
    return master


def _warn_if_in_clear(args: argparse.Namespace) -> None:
    from deploy.local.tls import is_loopback

    if not is_loopback(args.listen) and args.tls_cert is None:
        print(
            f"warning: the master listens on {args.listen} without TLS: calls, session tokens and passwords "
            "cross the network in clear (give --tls-cert and --tls-key)",
            file=sys.stderr,
        )


def _absolute(path: Path | None) -> str:
    return str(path.expanduser().resolve()) if path is not None else ""


def _certificate_environment(record: "ClusterRecord") -> dict[str, str]:
    """DET_MASTER_CERT_FILE and DET_MASTER_CERT_NAME, where this machine's CLI needs them to
    check the master's certificate (none without TLS)."""
    from deploy.local.tls import tls_environment

    environment = tls_environment(record.tls_cert, record.tls_key, record.master_host())
    return {name: value for name, value in environment.items() if name.startswith("DET_MASTER_CERT_")}


def _keep_initial_password(args: argparse.Namespace, data_dir: Path) -> None:
    """The built-in users' password, kept for the gateway (initial_password.py):
    the one given, blank when allowed, or, for a new cluster, a generated one."""
    from deploy.local import cluster, initial_password
    from deploy.local.initial_password import InitialPassword

    if args.initial_user_password is not None or args.allow_blank_password:
        initial_password.save(data_dir, InitialPassword(args.initial_user_password or "", generated=False))
    elif cluster.recorded_cluster_id(data_dir) is None and initial_password.load(data_dir) is None:
        initial_password.save(data_dir, InitialPassword(initial_password.generate(), generated=True))


def _log_in_operator(data_dir: Path, master: str, certificate: dict[str, str]) -> None:
    """Logs whoever ran cluster-up in as `admin` with the initial password (a
    token in their CLI cache), shows a generated password once, then removes
    the password's file. A cluster whose users had other passwords already
    keeps them. `certificate`: the DET_MASTER_CERT_ variables its TLS needs."""
    from deploy.local import initial_password
    from determined.cli._auth import TokenStore
    from determined.cli._client import Gateway, master_address
    from determined.common.passwords import salted_hash

    initial = initial_password.load(data_dir)
    if initial is None:
        return
    gateway = Gateway(master_address(master), environ=dict(os.environ, **certificate))
    try:
        token = gateway.login("admin", salted_hash(initial.password))
    except CliError as refused:
        if refused.code != "UNAUTHENTICATED":  # kept for the next cluster-up to try again
            print(
                f"warning: could not log you in as admin ({refused}); cluster-up tries again when run again",
                file=sys.stderr,
            )
            return
        initial_password.forget(data_dir)
        print(
            "The users already had their passwords: the initial password was not applied. "
            "Log in with: det user login"
        )
        return
    TokenStore(gateway.address).remember("admin", token, active=True)
    if initial.generated:
        print(
            f"admin and determined have the password: {initial.password} "
            "(shown once; change it with det user change-password)"
        )
    print("You are logged in as admin")
    initial_password.forget(data_dir)


def scheduler_settings(args: argparse.Namespace) -> dict[str, str]:
    """The services' DET_ settings cluster-up's scheduling and storage flags make (unset flags
    make none)."""
    settings = {}
    if args.checkpoint_storage:
        settings["DET_CHECKPOINT_STORAGE"] = checkpoint_storage_setting(args.checkpoint_storage)
    if args.scheduler:
        settings["DET_SCHEDULER_TYPE"] = args.scheduler
    if args.pool_scheduler:
        settings["DET_SCHEDULER_POOL_TYPES"] = ",".join(args.pool_scheduler)
    if args.agent_lost_s is not None:
        settings["DET_AGENT_LOST_S"] = repr(args.agent_lost_s)
    if args.min_run_s is not None:
        settings["DET_SCHEDULER_MIN_RUN_S"] = repr(args.min_run_s)
    return settings


def checkpoint_storage_setting(path: Path) -> str:
    """The gateway's DET_CHECKPOINT_STORAGE (JSON) from a YAML file holding a checkpoint_storage
    section (bare, or under a `checkpoint_storage:` key); CliError naming what is wrong."""
    import json

    from pydantic import ValidationError

    from determined.common import expconf
    from determined.common.expconf._errors import messages_from
    from determined.common.expconf._yaml import parse_yaml

    try:
        section = parse_yaml(path.expanduser().read_text())
    except OSError as error:
        raise CliError(f"cannot read --checkpoint-storage {path}: {error.strerror or error}") from None
    except expconf.InvalidConfigError as error:
        raise CliError(f"--checkpoint-storage {path}: {'; '.join(error.errors)}") from None
    if isinstance(section, dict) and isinstance(section.get("checkpoint_storage"), dict):
        section = section["checkpoint_storage"]
    if not isinstance(section, dict):
        raise CliError(f"--checkpoint-storage {path} must hold a checkpoint_storage section (a mapping)")
    if "type" not in section:
        raise CliError(
            f"--checkpoint-storage {path}: type is required (shared_fs, directory, s3, gcs or azure)"
        )
    try:
        expconf.CheckpointStorage.model_validate(section)
    except ValidationError as error:
        problems = messages_from(error, expconf.CheckpointStorage)
        raise CliError(f"--checkpoint-storage {path}: {'; '.join(problems)}") from None
    return json.dumps(section, sort_keys=True)


def _pool_scheduler(text: str) -> str:
    pool, equals, kind = text.partition("=")
    if not equals or not pool.strip() or kind.strip() not in SCHEDULERS:
        raise argparse.ArgumentTypeError(f"{text!r} is not POOL=fair_share or POOL=priority")
    return f"{pool.strip()}={kind.strip()}"


def _agent_id(text: str) -> str:
    from deploy.local.cluster import AGENT_ID

    if text and not AGENT_ID.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} cannot be an agent id: 1 to 64 letters, digits, '.', '-' or '_'"
        )
    return text


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is less than 1")
    return value


def _port(text: str) -> int:
    value = _positive(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"{text} is not a port (1 to 65535)")
    return value


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds")
    return value


def _positive_float(text: str) -> float:
    value = _number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} is not above 0")
    return value


def _non_negative_float(text: str) -> float:
    value = _number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is below 0")
    return value


def agent_up(args: argparse.Namespace) -> int:
    from deploy.local import cluster, control

    if args.advertise_host and not args.master_host:
        raise CliError(
            "--advertise-host is for an agent of a cluster elsewhere (--master-host); this machine's "
            "cluster advertises the address cluster-up --advertise-host gave it"
        )
    try:
        if args.master_host:
            return _remote_agent_up(args)
        agent = control.agent_up(_data_dir(args), args.agent_id, args.cpu_slots, args.pool)
    except cluster.DeployError as failure:
        raise CliError(str(failure)) from None
    print(f"Agent {agent.agent_id} is up (part {agent.part}, pool {agent.pool_name})")
    return 0


def agent_credentials(args: argparse.Namespace) -> int:
    from deploy.local import cluster, control

    try:
        if args.revoke:
            control.revoke_agent_credentials(_data_dir(args), args.agent_id)
            print(f"Agent {args.agent_id}'s nats-server user is removed: its secret file no longer logs in")
            return 0
        path = control.agent_credentials(_data_dir(args), args.agent_id)
    except cluster.DeployError as failure:
        raise CliError(str(failure)) from None
    print(
        f"Copy {path} to the agent's machine and run there: det deploy local agent-up --master-host <this host> "
        f"--secret-file <the copy>"
    )
    return 0


def _remote_agent_up(args: argparse.Namespace) -> int:
    """Asks the master where the cluster's NATS is, then starts the agent here."""
    import socket

    from deploy.local import cluster, control
    from determined.cli._client import Gateway
    from determined.proto import api_pb2

    master, host = _remote_master(args.master_host, args.master_port)
    gateway = Gateway(master)
    info = gateway.call(gateway.stub.GetMaster, api_pb2.GetMasterRequest())
    if not info.nats_url:
        raise CliError(f"the master at {master} does not say where its NATS is (an older version?)")
    if _loopback(info.nats_url) and not _loopback(f"nats://{host}"):
        raise CliError(
            f"the cluster at {master} offers NATS at {info.nats_url} only, which other machines cannot "
            "reach: start it with det deploy local cluster-up --advertise-host <its address>"
        )
    given = _secret(args.secret_file) if args.secret_file else {}
    if not given.get("nats_user") or not given.get("nats_password") or not given.get("secret"):
        raise CliError(
            "an agent for another machine's cluster needs its own secret file: on the cluster's machine "
            "run det deploy local agent-credentials --agent-id <id>, copy the file it names here and "
            "pass --secret-file"
        )
    agent_id = args.agent_id or given.get("agent_id") or socket.gethostname()
    if given.get("agent_id") and agent_id != given["agent_id"]:
        raise CliError(
            f"{args.secret_file} is agent {given['agent_id']}'s: run it with that --agent-id, or make "
            f"one for {agent_id} (det deploy local agent-credentials --agent-id {agent_id})"
        )
    remote = cluster.RemoteCluster(
        master,
        info.nats_url,
        info.namespace or "det",
        info.cluster_id,
        given["secret"],
        given["nats_password"],
        given["nats_user"],
        **_certificate_of_master(),
    )
    agent = cluster.added_agent([], agent_id, args.cpu_slots, args.pool)
    data_dir = Path(args.data_dir or cluster.default_data_dir().with_name("determined-es-agent")).expanduser()
    options = cluster.ClusterOptions(
        data_dir=data_dir, cpu_slots=args.cpu_slots, gpu=args.gpu, advertise_host=args.advertise_host
    )
    result = control.remote_agent_up(data_dir, remote, agent, options)
    print(
        f"Agent {agent.agent_id} is up for the cluster at {master} ({result.done}); its data and logs are in "
        f"{data_dir.resolve()}"
    )
    return 0


def _remote_master(master_host: str, port: int) -> tuple[str, str]:
    """The address agent-up's agents and trials reach the master by (https:// when --master-host
    says so or DET_MASTER_CERT_FILE is set: TLS, as every client decides) and its host."""
    host = master_host.split("://", 1)[-1].rstrip("/")
    tls = master_host.lower().startswith("https://") or bool(os.environ.get("DET_MASTER_CERT_FILE"))
    return f"{'https://' if tls else ''}{host}:{port}", host


def _certificate_of_master() -> dict[str, str]:
    """RemoteCluster's master_cert_file (absolute: the agent's supervisor runs elsewhere) and
    master_cert_name, from agent-up's environment."""
    cert_file = os.environ.get("DET_MASTER_CERT_FILE", "")
    return {
        "master_cert_file": str(Path(cert_file).expanduser().resolve()) if cert_file else "",
        "master_cert_name": os.environ.get("DET_MASTER_CERT_NAME", ""),
    }


def _loopback(url: str) -> bool:
    from urllib.parse import urlsplit

    host = urlsplit(url).hostname or ""
    return host in ("localhost", "::1") or host.startswith("127.")


def _secret(path: Path) -> dict[str, str]:
    """What an agent's secret file (det deploy local agent-credentials) holds: secret,
    agent_id, nats_user, nats_password; {} for anything else."""
    import json

    try:
        identity = json.loads(path.expanduser().read_text())
    except (OSError, ValueError) as error:
        raise CliError(f"cannot read {path}: {error}") from None
    if not isinstance(identity, dict):
        return {}
    return {key: str(identity.get(key, "")) for key in ("secret", "agent_id", "nats_user", "nats_password")}


def agent_down(args: argparse.Namespace) -> int:
    from deploy.local import cluster, control

    data_dir = (
        Path(args.data_dir).expanduser().resolve()
        if args.data_dir
        else cluster.default_data_dir().with_name("determined-es-agent")
        if args.remote
        else _data_dir(args)
    )
    try:
        agent = control.agent_down(data_dir, args.agent_id)
    except cluster.DeployError as failure:
        raise CliError(str(failure)) from None
    print(f"Agent {agent.agent_id} is down and removed (part {agent.part})")
    return 0


def cluster_down(args: argparse.Namespace) -> int:
    from deploy.compose import cluster as compose
    from deploy.local import cluster, control

    data_dir = _data_dir(args)
    if args.docker:
        try:
            stopped = compose.cluster_down(data_dir)
        except cluster.DeployError as failure:
            raise CliError(str(failure)) from None
        print(
            "Cluster stopped (its volumes are kept)"
            if stopped
            else f"No compose cluster was started from {data_dir}"
        )
        return 0
    if not control.cluster_down(data_dir):
        print(f"No cluster is running from {data_dir}")
        return 0
    print("Cluster stopped")
    return 0


def verify_read_models(args: argparse.Namespace) -> int:
    """`python -m services.gateway.rebuild --verify` with the cluster's gateway's settings."""
    import subprocess

    from deploy.local import cluster, control

    try:
        environment = control.gateway_environment(_data_dir(args))
    except cluster.DeployError as failure:
        raise CliError(str(failure)) from None
    command = [sys.executable, "-m", "services.gateway.rebuild", "--verify"]
    if args.max_differences is not None:
        command += ["--max-differences", str(args.max_differences)]
    return subprocess.run(command, env=environment).returncode


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
    from deploy.compose import cluster as compose
    from deploy.local import cluster, control, status

    data_dir = _data_dir(args)
    try:
        report = (
            compose.cluster_report(data_dir)
            if compose.is_compose_cluster(data_dir)
            else control.cluster_report(data_dir)
        )
    except cluster.DeployError as failure:
        raise CliError(str(failure)) from None
    if args.json:
        print_json(status_json(report))
        return 0
    print(status_heading(report))
    now = time.time()
    parts = report.status.parts if report.status else ()
    print_table(
        ["Part", "State", "PID", "Restarts", "Uptime", "Disk", "Last error"],
        [part_row(part, now) for part in parts],
    )
    print("\nAgents:")
    print_table(
        ["Part", "Agent ID", "CPU slots", "Resource Pool"],
        [[a.part, a.agent_id, a.cpu_slots, a.pool_name] for a in report.record.agent_specs()],
    )
    notes = status.event_notes(report.events)
    if notes:
        print("\nEvent log:")
        print("\n".join(notes))
    return 0


def status_json(report: "ClusterReport") -> dict[str, Any]:
    from dataclasses import asdict

    document: dict[str, Any] = report.status.to_json() if report.status else {"parts": []}
    return dict(
        document,
        data_dir=str(report.data_dir),
        supervisor_alive=report.supervisor_alive,
        master_port=report.record.master_port,
        postgres_data_dir=str(report.record.postgres_folder(report.data_dir)),
        agents=[asdict(agent) for agent in report.record.agent_specs()],
        events=report.events,
    )


def status_heading(report: "ClusterReport") -> str:
    where = (
        f"Cluster in {report.data_dir}: master at {report.record.master_address()}; "
        f"PostgreSQL data in {report.record.postgres_folder(report.data_dir)}"
    )
    if report.compose_project:
        return f"Cluster in {report.data_dir}: master at {report.record.master_address()}; Docker Compose project {report.compose_project}"
    if report.supervisor_alive:
        return f"{where}\nSupervisor pid {report.record.supervisor_pid}"
    return (
        f"{where}\nIts supervisor is not running: the parts are as it last recorded them. "
        "Repair with: det deploy local cluster-up"
    )


def part_row(part: "PartStatus", now: float) -> list[Any]:
    up = part.state in ("running", "starting") and part.started_at > 0
    error = part.last_error.splitlines()[0] if part.last_error else ""
    return [
        part.name,
        part.state,
        part.pid or "",
        part.restarts,
        format_duration(now - part.started_at) if up else "",
        format_bytes(part.disk_bytes),
        error,
    ]


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
