"""A local cluster's configuration: the options cluster-up was given, what
it records in run/cluster.json, and the environment each service gets. The
parts themselves run under the supervisor (supervisor.py); control.py holds
what the `det deploy local` commands do.

    <data dir>/
        nats/          JetStream store (the event log, logs, contexts)
        postgres/      PostgreSQL data (read models only: rebuilt from the log); as root it
                       lives under /var/lib/determined-es instead (see postgres_home.py)
        checkpoints/   the default shared_fs checkpoint storage
        agent-work/    one folder per allocation
        logs/          <service>.log (rotated by the service), <part>.out (what a part prints
                       on stdout/stderr, rotated by the supervisor), nats-server.log (rotated by
                       nats-server), postgres.log, supervisor.log
        run/           cluster.json (options, pids), status.json (every part, by the
                       supervisor), requests/ (to the supervisor), ready files
        cluster.secret signs allocation tokens; never in the event log
"""

import json
import os
import secrets
import uuid
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from deploy.local.status import write_atomically
from services.common.processes import process_alive

DATABASE = "determined"


class DeployError(Exception):
    """Printed for the user; nothing is left half-started."""


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
    fork_trials: bool = False
    preload: str = ""


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
    fork_trials: bool = False
    preload: str = ""
    supervisor_pid: int = 0
    # Field 22 of /proc/<pid>/stat of each pid above, by part name ("supervisor" too).
    start_ticks: dict[str, int] = field(default_factory=dict)
    # Where PostgreSQL keeps its data ("": <data dir>/postgres).
    postgres_data_dir: str = ""

    @classmethod
    def of(cls, options: ClusterOptions) -> "ClusterRecord":
        return cls(
            options.master_port, options.nats_port, options.postgres_port, cpu_slots=options.cpu_slots,
            gpu=options.gpu, json_logs=options.json_logs, agent_id=options.agent_id,
            fork_trials=options.fork_trials, preload=options.preload,
        )

    def options(self, data_dir: Path) -> ClusterOptions:
        return ClusterOptions(
            data_dir, self.master_port, self.nats_port, self.postgres_port, self.cpu_slots, self.gpu,
            self.json_logs, self.agent_id, self.fork_trials, self.preload,
        )

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
        write_atomically(path, json.dumps(asdict(self), indent=2))

    def running(self) -> dict[str, int]:
        return {name: pid for name, pid in self.pids.items() if process_alive(pid)}


def recorded_cluster_id(data_dir: Path) -> str | None:
    """The id of the cluster whose data is in `data_dir`; None if there is none."""
    try:
        return str(json.loads((data_dir / "cluster.secret").read_text())["cluster_id"])
    except (OSError, ValueError, KeyError):
        return None


def cluster_identity(data_dir: Path) -> tuple[str, str]:
    """The cluster id and token secret, made once and kept with the data."""
    secret_file = data_dir / "cluster.secret"
    if not secret_file.exists():
        secret_file.write_text(json.dumps({"cluster_id": str(uuid.uuid4()), "secret": secrets.token_hex(32)}))
        secret_file.chmod(0o600)
    identity = json.loads(secret_file.read_text())
    return identity["cluster_id"], identity["secret"]


# The caller's DET_ variables that reach the services: tuning an operator may set for
# cluster-up (README, "Operating the cluster"). Every other DET_ variable is made here.
TUNING_SETTINGS = (
    "DET_LOG_LEVEL", "DET_LOG_MAX_BYTES", "DET_LOG_BACKUPS", "DET_LOGS_MAX_BYTES",
    "DET_AGENT_KEEP_FAILED_S", "DET_AGENT_LOG_MEMORY_BYTES", "DET_AGENT_STOP_GRACE_S",
    "DET_AGENT_KILL_GRACE_S",
)


def service_environment(options: ClusterOptions, data_dir: Path, nats_url: str, pg_url: str) -> dict[str, str]:
    """What every service gets: the DET_ settings made from the options, the caller's
    TUNING_SETTINGS, and the caller's variables that are not DET_ ones."""
    cluster_id, secret = cluster_identity(data_dir)
    environment = {
        key: value for key, value in os.environ.items()
        if not key.startswith("DET_") or key in TUNING_SETTINGS
    }
    environment.update(
        DET_NATS_URL=nats_url,
        DET_NAMESPACE="det",
        DET_LOG_JSON="1" if options.json_logs else "0",
        DET_CLUSTER_SECRET=secret,
        DET_CLUSTER_ID=cluster_id,
        DET_DATABASE_URL=pg_url.rsplit("/", 1)[0] + f"/{DATABASE}",
        DET_GATEWAY_PORT=str(options.master_port),
        DET_CHECKPOINT_PATH=str(data_dir / "checkpoints"),
        DET_AGENT_ID=options.agent_id or os.uname().nodename,
        DET_AGENT_WORK_DIR=str(data_dir / "agent-work"),
        DET_AGENT_CPU_SLOTS=str(options.cpu_slots),
        DET_MASTER_ADDRESS=f"127.0.0.1:{options.master_port}",
        DET_STATUS_FILE=str(data_dir / "run" / "status.json"),
        PYTHONUNBUFFERED="1",
    )
    if not options.gpu:
        environment["DET_AGENT_GPUS"] = "0"
    if options.fork_trials:
        environment.update(DET_AGENT_FORK_SERVER="1", DET_AGENT_PRELOAD=options.preload)
    return environment
