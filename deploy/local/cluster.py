"""A local cluster's configuration: the options cluster-up was given, what
it records in run/cluster.json, and the environment each service gets. The
parts themselves run under the supervisor (supervisor.py); control.py holds
what the `det deploy local` commands do.

    <data dir>/
        nats/          JetStream store (the event log, logs, contexts)
        postgres/      PostgreSQL data (read models only: rebuilt from the log); as root it
                       lives under /var/lib/determined-es instead (see postgres_home.py)
        checkpoints/   the default shared_fs checkpoint storage (the trial user's, see
                       trial_home.py, which also says where the agents' work folders are:
                       not here, away from the secrets)
        logs/          <service>.log (rotated by the service), <part>.out (what a part prints
                       on stdout/stderr, rotated by the supervisor), nats-server.log (rotated by
                       nats-server), postgres.log, supervisor.log
        run/           cluster.json (options, pids), status.json (every part, by the
                       supervisor), requests/ (to the supervisor), ready files
        cluster.secret signs allocation and session tokens; never in the event log
        agent-secrets/<agent id>.secret  what a remote agent's operator copies (agent_secret_file)
        credentials.json (0600) every nats-server user's and PostgreSQL role's password
                       (credentials.py); each part gets its own only
        initial-user-password  (0600) until cluster-up has logged the operator in (initial_password.py)
"""

import json
import os
import re
import secrets
import uuid
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from deploy.local.credentials import agent_user, credentials, write_private
from deploy.local.decisions import part_names
from deploy.local.status import write_atomically
from deploy.local.tls import tls_environment
from deploy.local.trial_home import (
    TRIAL_USER_SETTING,
    checkpoint_folder,
    default_cache_home,
    open_to_others,
    trial_home,
    trial_user_name,
)
from services.agent.trial_user import TRIAL_VENV_SUFFIX
from services.common.processes import process_alive
from services.common.scheduling import DEFAULT_POOL

DATABASE = "determined"


class DeployError(Exception):
    """Printed for the user; nothing is left half-started."""


# An agent id becomes a part name, file names and a subject token.
AGENT_ID = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}")


@dataclass(frozen=True)
class AgentSpec:
    """One agent the supervisor runs: its part name (its files: logs/<part>.out,
    run/<part>.ready), its agent id, its CPU slots (when it finds no GPU) and
    its resource pool ("" = default)."""

    part: str
    agent_id: str
    cpu_slots: int = 1
    pool: str = ""

    @property
    def pool_name(self) -> str:
        """Its pool as users name it."""
        return self.pool or DEFAULT_POOL


def initial_agents(count: int, cpu_slots: int, agent_name: str) -> list[AgentSpec]:
    """cluster-up's agents. One: the part "agent", its id --agent-name or the
    host name (as before several agents). N > 1: parts agent-1 .. agent-N, ids
    agent-1 .. agent-N, or <agent-name>-1 .. <agent-name>-N."""
    if count == 1:
        return [AgentSpec("agent", agent_name or os.uname().nodename, cpu_slots)]
    return [
        AgentSpec(f"agent-{index}", f"{agent_name or 'agent'}-{index}", cpu_slots)
        for index in range(1, count + 1)
    ]


def added_agent(agents: list[AgentSpec], agent_id: str, cpu_slots: int, pool: str) -> AgentSpec:
    """The agent agent-up adds: `agent_id`, or the first free agent-<n>; its
    part is named after it (agent-<id> unless the id starts with agent-).
    DeployError when the id is taken or cannot be one."""
    ids = {agent.agent_id for agent in agents}
    parts = {agent.part for agent in agents}
    if not agent_id:
        number = next(n for n in range(1, len(agents) + 2) if f"agent-{n}" not in ids | parts)
        agent_id = f"agent-{number}"
    if not AGENT_ID.fullmatch(agent_id):
        raise DeployError(f"{agent_id!r} cannot be an agent id: 1 to 64 letters, digits, '.', '-' or '_'")
    if agent_id in ids:
        raise DeployError(f"agent {agent_id} runs here already")
    part = agent_id if agent_id.startswith("agent-") else f"agent-{agent_id}"
    if part in parts:
        raise DeployError(f"a part called {part} runs here already; pick another --agent-id")
    return AgentSpec(part, agent_id, cpu_slots, pool)


@dataclass(frozen=True)
class RemoteCluster:
    """Where a folder that runs only agents finds its cluster (from the
    gateway's GetMaster, and the cluster's secret file)."""

    master_address: str
    nats_url: str
    namespace: str
    cluster_id: str
    secret: str
    # The agent's nats-server user and password (from its secret file, agent_secret_file).
    nats_password: str = ""
    nats_user: str = ""
    # How its agents and their trials check the cluster's TLS certificate (agent-up's
    # DET_MASTER_CERT_FILE, made absolute, and DET_MASTER_CERT_NAME); "": not given.
    master_cert_file: str = ""
    master_cert_name: str = ""

    def certificate_environment(self) -> dict[str, str]:
        given = {"DET_MASTER_CERT_FILE": self.master_cert_file, "DET_MASTER_CERT_NAME": self.master_cert_name}
        return {name: value for name, value in given.items() if value}


def default_data_dir() -> Path:
    configured = os.environ.get("DET_DATA_DIR")
    return Path(configured) if configured else Path.home() / ".local" / "share" / "determined-es"


@dataclass
class ClusterOptions:
    data_dir: Path
    master_port: int = 8080
    nats_port: int = 4222
    postgres_port: int = 5433
    cpu_slots: int = 1
    gpu: bool = True
    json_logs: bool = False
    agent_id: str = ""
    # The agent forks plain `python3 script.py` trials from a warm process
    # that has imported determined, grpc and the `preload` modules.
    fork_trials: bool = True
    preload: str = ""
    agents: int = 1
    # The address other machines reach this one by: nats-server then listens on
    # every interface and GetMaster hands out nats://<advertise_host>:<port>.
    advertise_host: str = ""
    # DET_ settings for the services (the scheduler's, DET_AGENT_LOST_S, ...).
    settings: dict[str, str] = field(default_factory=dict)
    # The address the gateway listens on: loopback unless cluster-up --listen.
    listen: str = "127.0.0.1"
    # PEM files (absolute paths) the master serves TLS with (cluster-up --tls-cert/--tls-key;
    # checked by deploy/local/tls.py); "": plaintext.
    tls_cert: str = ""
    tls_key: str = ""
    # The bundle a read-only cluster replays (det deploy local replay; replay_home.py): it runs
    # nats-server, PostgreSQL and the gateway only. "": a cluster.
    replay: str = ""


@dataclass
class ClusterRecord:
    """run/cluster.json: written by cluster-up, then kept current by the
    supervisor (the pids of the parts it runs and its own, with their start
    times so that a reused pid is never taken for ours).

    The option fields let the supervisor give each part the environment cluster-up asked
    for; a cluster.json written before a field existed loads with its default."""

    master_port: int
    nats_port: int
    postgres_port: int
    pids: dict[str, int] = field(default_factory=dict)
    cpu_slots: int = 1
    gpu: bool = True
    json_logs: bool = False
    agent_id: str = ""
    fork_trials: bool = True
    preload: str = ""
    supervisor_pid: int = 0
    # Field 22 of /proc/<pid>/stat of each pid above, by part name ("supervisor" too).
    start_ticks: dict[str, int] = field(default_factory=dict)
    # Where PostgreSQL keeps its data ("": <data dir>/postgres).
    postgres_data_dir: str = ""
    # The agents it runs, as AgentSpec fields (an older cluster.json: none
    # recorded, i.e. the one part "agent" made of cpu_slots and agent_id).
    agents: list[dict[str, Any]] = field(default_factory=list)
    advertise_host: str = ""
    settings: dict[str, str] = field(default_factory=dict)
    # Set when the folder runs only agents, for the cluster it describes (RemoteCluster fields).
    remote: dict[str, str] = field(default_factory=dict)
    listen: str = "127.0.0.1"
    tls_cert: str = ""
    tls_key: str = ""
    replay: str = ""

    @classmethod
    def of(cls, options: ClusterOptions) -> "ClusterRecord":
        agents = [] if options.replay else initial_agents(options.agents, options.cpu_slots, options.agent_id)
        return cls(
            options.master_port,
            options.nats_port,
            options.postgres_port,
            cpu_slots=options.cpu_slots,
            gpu=options.gpu,
            json_logs=options.json_logs,
            agent_id=options.agent_id,
            fork_trials=options.fork_trials,
            preload=options.preload,
            agents=[asdict(a) for a in agents],
            advertise_host=options.advertise_host,
            settings=dict(options.settings),
            listen=options.listen,
            tls_cert=options.tls_cert,
            tls_key=options.tls_key,
            replay=options.replay,
        )

    def options(self, data_dir: Path) -> ClusterOptions:
        return ClusterOptions(
            data_dir,
            self.master_port,
            self.nats_port,
            self.postgres_port,
            self.cpu_slots,
            self.gpu,
            self.json_logs,
            self.agent_id,
            self.fork_trials,
            self.preload,
            len(self.agent_specs()),
            self.advertise_host,
            dict(self.settings),
            self.listen,
            self.tls_cert,
            self.tls_key,
            self.replay,
        )

    def agent_specs(self) -> list[AgentSpec]:
        if not self.agents and not self.remote and not self.replay:
            return initial_agents(1, self.cpu_slots, self.agent_id)
        return [AgentSpec(**agent) for agent in self.agents]

    def remote_cluster(self) -> RemoteCluster | None:
        return RemoteCluster(**self.remote) if self.remote else None

    def part_names(self) -> tuple[str, ...]:
        agents = [agent.part for agent in self.agent_specs()]
        return part_names(agents, agents_only=bool(self.remote), replay=bool(self.replay))

    def master_host(self) -> str:
        return master_host(self.listen)

    def master_address(self) -> str:
        """What a user on this machine sets as DET_MASTER: host:port, or https://host:port
        when the master serves TLS."""
        address = f"{self.master_host()}:{self.master_port}"
        return f"https://{address}" if self.tls_cert else address

    def postgres_folder(self, data_dir: Path) -> Path:
        return Path(self.postgres_data_dir) if self.postgres_data_dir else data_dir / "postgres"

    @staticmethod
    def path(data_dir: Path) -> Path:
        return data_dir / "run" / "cluster.json"

    @classmethod
    def load(cls, data_dir: Path) -> "ClusterRecord | None":
        path = cls.path(data_dir)
        if not path.exists():
            return None
        known = {f.name for f in fields(cls)}
        return cls(**{key: value for key, value in json.loads(path.read_text()).items() if key in known})

    def save(self, data_dir: Path) -> None:
        path = self.path(data_dir)
        path.parent.mkdir(parents=True, exist_ok=True)
        # An agents-only folder's record holds its cluster's secret and the agents' password.
        (write_private if self.remote else write_atomically)(path, json.dumps(asdict(self), indent=2))

    def running(self) -> dict[str, int]:
        return {name: pid for name, pid in self.pids.items() if process_alive(pid)}


def master_host(listen: str) -> str:
    """The host this machine reaches a gateway listening on `listen` by: localhost
    for loopback or every interface, else that address."""
    if listen in ("0.0.0.0", "::", "", "localhost") or listen.startswith("127.") or listen == "::1":
        return "localhost"
    return listen


def recorded_cluster_id(data_dir: Path) -> str | None:
    """The id of the cluster whose data is in `data_dir`; None if there is none."""
    try:
        return str(json.loads((data_dir / "cluster.secret").read_text())["cluster_id"])
    except (OSError, ValueError, KeyError):
        return None


def cluster_identity(data_dir: Path) -> tuple[str, str]:
    """The cluster id and token secret, made once and kept with the data (cluster.secret,
    0600). An older file's password of the agents' shared nats-server user, which is no
    more, is dropped."""
    secret_file = data_dir / "cluster.secret"
    if not secret_file.exists():
        write_private(
            secret_file, json.dumps({"cluster_id": str(uuid.uuid4()), "secret": secrets.token_hex(32)})
        )
    identity = json.loads(secret_file.read_text())
    if "nats_user" in identity or "nats_password" in identity:
        identity = {
            key: value for key, value in identity.items() if key not in ("nats_user", "nats_password")
        }
        write_private(secret_file, json.dumps(identity))
    return identity["cluster_id"], identity["secret"]


AGENT_SECRETS = "agent-secrets"


def agent_secret_file(data_dir: Path, agent_id: str) -> Path:
    """The file (0600) a remote agent's operator copies to run the agent `agent_id`
    (agent-up --master-host --secret-file): the cluster's id and token secret and that
    agent's own nats-server user and password, made now if new (credentials.json; the
    caller reloads nats-server)."""
    if not AGENT_ID.fullmatch(agent_id):
        raise DeployError(f"{agent_id!r} cannot be an agent id: 1 to 64 letters, digits, '.', '-' or '_'")
    cluster_id, secret = cluster_identity(data_dir)
    user = credentials(data_dir, [agent_id]).nats[agent_user(agent_id)]
    folder = data_dir / AGENT_SECRETS
    folder.mkdir(mode=0o700, exist_ok=True)
    path = folder / f"{agent_id}.secret"
    identity = {
        "cluster_id": cluster_id,
        "secret": secret,
        "agent_id": agent_id,
        "nats_user": user.name,
        "nats_password": user.password,
    }
    write_private(path, json.dumps(identity))
    return path


# The caller's DET_ variables that reach the services: tuning an operator may set for
# cluster-up (README, "Operating the cluster"). Every other DET_ variable is made here.
TUNING_SETTINGS = (
    "DET_LOG_LEVEL",
    "DET_LOG_MAX_BYTES",
    "DET_LOG_BACKUPS",
    "DET_LOGS_MAX_BYTES",
    "DET_AGENT_KEEP_FAILED_S",
    "DET_AGENT_LOG_MEMORY_BYTES",
    "DET_AGENT_STOP_GRACE_S",
    "DET_AGENT_KILL_GRACE_S",
    "DET_AGENT_HEARTBEAT_S",
    "DET_AGENT_LOST_S",
    "DET_SCHEDULER_TYPE",
    "DET_SCHEDULER_POOL_TYPES",
    "DET_SCHEDULER_MIN_RUN_S",
    "DET_SCHEDULER_DEFAULT_PRIORITY",
    "DET_UNMANAGED_TIMEOUT_S",
    TRIAL_USER_SETTING,
)


def service_environment(options: ClusterOptions, data_dir: Path, nats_url: str) -> dict[str, str]:
    """What every service gets: the DET_ settings made from the options, the caller's
    TUNING_SETTINGS, and the caller's variables that are not DET_ ones. No credentials:
    each part gets its own (`part_credentials`)."""
    cluster_id, secret = cluster_identity(data_dir)
    environment = _inherited(options.settings)
    if options.advertise_host:
        environment["DET_ADVERTISED_NATS_URL"] = f"nats://{options.advertise_host}:{options.nats_port}"
    environment.update(
        DET_NATS_URL=nats_url,
        DET_NAMESPACE="det",
        DET_LOG_JSON="1" if options.json_logs else "0",
        DET_CLUSTER_SECRET=secret,
        DET_CLUSTER_ID=cluster_id,
        DET_GATEWAY_PORT=str(options.master_port),
        DET_GATEWAY_HOST=options.listen,
        DET_HTTP_PORT=str(http_port(options.master_port, options.settings)),
        DET_PROXY_PORT=str(proxy_port(options.master_port, options.settings)),
        DET_CHECKPOINT_PATH=str(default_checkpoints(data_dir, options.settings)),
        DET_MASTER_ADDRESS=master_url(options),
        DET_STATUS_FILE=str(data_dir / "run" / "status.json"),
        PYTHONUNBUFFERED="1",
    )
    _agent_options(environment, options)
    environment.update(tls_environment(options.tls_cert, options.tls_key, _reachable(options.listen)))
    return environment


def part_credentials(part: str, data_dir: Path, postgres_port: int, agent_id: str = "") -> dict[str, str]:
    """What one part of this machine's cluster gets to log in with, and nothing of the
    others': its nats-server user (an agent part's: its agent's, `agent_id`) and, for the
    gateway, the database URL with its role's password."""
    found = credentials(data_dir, [agent_id] if agent_id else [])
    user = found.nats_user(part, agent_id)
    environment = {"DET_NATS_USER": user.name, "DET_NATS_PASSWORD": user.password}
    if part == "gateway":
        environment["DET_DATABASE_URL"] = found.database_url(postgres_port, DATABASE)
    return environment


def http_port(master_port: int, settings: dict[str, str]) -> int:
    """The gateway's HTTP API (and web UI) port: DET_HTTP_PORT given to cluster-up, else the
    master's port + 1."""
    return int(settings.get("DET_HTTP_PORT") or master_port + 1)


def proxy_port(master_port: int, settings: dict[str, str]) -> int:
    """The port of tasks' pages (notebooks, TensorBoards; an origin apart from the web UI's):
    DET_PROXY_PORT given to cluster-up, else the master's port + 2."""
    return int(settings.get("DET_PROXY_PORT") or master_port + 2)


def master_url(options: ClusterOptions) -> str:
    """Where the services and trials on this machine reach the gateway: host:port, or
    https://host:port when it serves TLS."""
    address = f"{_reachable(options.listen)}:{options.master_port}"
    return f"https://{address}" if options.tls_cert else address


def _reachable(listen: str) -> str:
    """What the services and trials on this machine dial to reach the gateway."""
    host = master_host(listen)
    return "127.0.0.1" if host == "localhost" else host


def _inherited(settings: dict[str, str]) -> dict[str, str]:
    """The caller's variables that are not DET_ ones, its TUNING_SETTINGS, and
    the settings cluster-up was given (which win)."""
    environment = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("DET_") or key in TUNING_SETTINGS
    }
    environment.update(settings)
    return environment


def default_checkpoints(data_dir: Path, settings: dict[str, str]) -> Path:
    """The default shared_fs checkpoint storage of the cluster in `data_dir` (trial_home.py)."""
    user = trial_user_name(settings, euid=os.geteuid())
    home = cluster_trial_home(data_dir)
    return checkpoint_folder(data_dir, home, trial_user=user, data_dir_open=open_to_others(data_dir))


def cluster_trial_home(data_dir: Path) -> Path:
    """Where the agents of the cluster in `data_dir` keep their work folders (trial_home.py)."""
    cluster_id = recorded_cluster_id(data_dir) or ""
    return trial_home(data_dir, cluster_id, euid=os.geteuid(), cache_home=default_cache_home())


def _agent_options(environment: dict[str, str], options: ClusterOptions) -> None:
    environment[TRIAL_USER_SETTING] = trial_user_name(options.settings, euid=os.geteuid())
    if options.settings.get("DET_AGENT_RUNTIME") == "docker":
        environment.update(container_settings(options.data_dir, options.settings))
    if not options.gpu:
        environment["DET_AGENT_GPUS"] = "0"
    environment.update(
        DET_AGENT_FORK_SERVER="1" if options.fork_trials else "0", DET_AGENT_PRELOAD=options.preload
    )


# What in a data folder no trial container may mount: secrets, the servers' files, the
# parts' state and logs. Its default checkpoint storage stays mountable.
PROTECTED_IN_DATA_DIR = (
    "cluster.secret",
    "credentials.json",
    "initial-user-password",
    "agent-secrets",
    "compose",
    "postgres",
    "nats",
    "run",
    "logs",
)


def container_settings(data_dir: Path, settings: dict[str, str]) -> dict[str, str]:
    """What an agent that runs trials in containers gets: the image of a config that names
    none (this version's CPU trial image, deploy/docker/) and the host paths no trial's bind
    mount may reach (DET_AGENT_DEFAULT_IMAGE and DET_AGENT_PROTECTED_PATHS given to
    cluster-up win)."""
    from deploy.docker.images import image_name

    protected = ",".join(str(data_dir / name) for name in PROTECTED_IN_DATA_DIR)
    given = settings.get("DET_AGENT_PROTECTED_PATHS")
    return {
        "DET_AGENT_DEFAULT_IMAGE": settings.get("DET_AGENT_DEFAULT_IMAGE") or image_name("cpu"),
        "DET_AGENT_PROTECTED_PATHS": f"{protected},{given}" if given else protected,
    }


def agent_environment(base: dict[str, str], agent: AgentSpec, data_dir: Path, address: str) -> dict[str, str]:
    """What one agent part gets on top of the services' environment: its id,
    slots, pool, work folder and the address gangs reach it by ("": the
    agent's host name)."""
    return dict(
        base,
        DET_AGENT_ID=agent.agent_id,
        DET_AGENT_CPU_SLOTS=str(agent.cpu_slots),
        DET_AGENT_POOL=agent.pool,
        DET_AGENT_WORK_DIR=str(agent_work_dir(data_dir, agent.part)),
        DET_AGENT_ADDRESS=address,
    )


def agent_work_dir(data_dir: Path, part: str) -> Path:
    """The agent part's work folder: <trial home>/agents/<part>/ (trial_home.py)."""
    return cluster_trial_home(data_dir) / "agents" / part


def every_agent_work_dir(data_dir: Path) -> list[Path]:
    """Where allocation folders of this data folder's agents may be: each agent's work folder,
    and where an older cluster-up put them (agent-work/ and agents/<part>/ in the data folder)."""
    home = cluster_trial_home(data_dir) / "agents"
    older = [data_dir / "agent-work", *sorted((data_dir / "agents").glob("*"))]
    parts = sorted(
        path for path in home.glob("*") if path.is_dir() and not path.name.endswith(TRIAL_VENV_SUFFIX)
    )
    return [*parts, *older]


def remote_environment(options: ClusterOptions, data_dir: Path, remote: RemoteCluster) -> dict[str, str]:
    """What the agents of a folder that runs only agents get: the cluster's
    addresses and secret instead of this machine's services."""
    environment = _inherited(options.settings)
    environment.update(
        DET_NATS_URL=remote.nats_url,
        DET_NAMESPACE=remote.namespace,
        DET_LOG_JSON="1" if options.json_logs else "0",
        DET_CLUSTER_SECRET=remote.secret,
        DET_CLUSTER_ID=remote.cluster_id,
        DET_NATS_USER=remote.nats_user,
        DET_NATS_PASSWORD=remote.nats_password,
        DET_MASTER_ADDRESS=remote.master_address,
        DET_STATUS_FILE=str(data_dir / "run" / "status.json"),
        PYTHONUNBUFFERED="1",
    )
    environment.update(remote.certificate_environment())
    _agent_options(environment, options)
    return environment
