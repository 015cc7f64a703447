"""`det deploy local cluster-up / cluster-down`: the whole cluster as
background processes whose data all lives under one directory.
`restart_service(data_dir, name)` restarts one service of a running cluster
(for operators and tests: a restarted service rebuilds its state from the log).

    <data dir>/
        nats/          JetStream store (the event log, logs, contexts)
        postgres/      PostgreSQL data (read models only: rebuilt from the log)
        checkpoints/   the default shared_fs checkpoint storage
        agent-work/    one folder per allocation
        logs/          one log file per service, nats-server and PostgreSQL
        run/           cluster.json (ports and pids), ready files
        cluster.secret signs allocation tokens; never in the event log
"""

import json
import os
import secrets
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from deploy.local.servers import NatsServer, PostgresServer, ServerError, port_is_taken, tail
from services.common.processes import process_alive

SERVICES = ("gateway", "searcher", "scheduler", "checkpoint", "agent")
READY_DEADLINE_S = 60.0
STOP_DEADLINE_S = 20.0
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
    """What cluster-up leaves in run/cluster.json for cluster-down, restart_service and users.

    The option fields after `pids` let a restarted service get the environment cluster-up
    gave it; a cluster.json written before they existed loads with their defaults."""

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
        path.write_text(json.dumps(asdict(self), indent=2))

    def running(self) -> dict[str, int]:
        return {name: pid for name, pid in self.pids.items() if process_alive(pid)}


def cluster_up(options: ClusterOptions) -> ClusterRecord:
    data_dir = options.data_dir.expanduser().resolve()
    existing = ClusterRecord.load(data_dir)
    if existing is not None and existing.running():
        raise AlreadyRunningError(
            f"A cluster is already running from {data_dir} (master localhost:{existing.master_port}); "
            "stop it with: det deploy local cluster-down"
        )
    _check_ports(options)
    for folder in ("nats", "checkpoints", "agent-work", "logs", "run"):
        (data_dir / folder).mkdir(parents=True, exist_ok=True)
    record = ClusterRecord.of(options)
    try:
        _start_everything(options, data_dir, record)
    except (DeployError, ServerError) as failure:
        _stop(data_dir, record)
        raise DeployError(str(failure)) from None
    return record


class AlreadyRunningError(DeployError):
    pass


def _check_ports(options: ClusterOptions) -> None:
    for name, port in (("master", options.master_port), ("nats", options.nats_port),
                       ("postgres", options.postgres_port)):
        if port_is_taken(port):
            raise DeployError(
                f"port {port} ({name}) is already in use; free it or pick another with --{name}-port"
            )


def _start_everything(options: ClusterOptions, data_dir: Path, record: ClusterRecord) -> None:
    nats, postgres = _servers(options, data_dir)
    record.pids["nats-server"] = nats.start().pid
    record.save(data_dir)
    postgres.start()
    record.pids["postgres"] = _postgres_pid(data_dir / "postgres")
    record.save(data_dir)
    _ensure_database(postgres.url)
    environment = _service_environment(options, data_dir, nats.url, postgres.url)
    for name in SERVICES:
        _start_service(name, environment, data_dir, record)
    _wait_until_ready(data_dir, record, SERVICES)


def restart_service(data_dir: Path, name: str) -> None:
    """Stops one service of the cluster running from `data_dir` (SIGTERM, SIGKILL after
    STOP_DEADLINE_S), starts it again with the environment cluster-up gave it and returns
    once it is ready (it has rebuilt its state from the log); cluster.json gets its new pid.
    The DET_ settings are recomputed exactly as cluster-up made them; other variables are
    inherited from the caller, as cluster-up's were. If it does not get ready, DeployError
    says why and the service stays down."""
    if name not in SERVICES:
        raise DeployError(f"no service is called {name!r}; the services are: {', '.join(SERVICES)}")
    data_dir = data_dir.expanduser().resolve()
    record = ClusterRecord.load(data_dir)
    if record is None or not record.running():
        raise DeployError(f"no cluster is running from {data_dir}")
    pid = record.pids.get(name)
    if pid is not None and process_alive(pid):
        _terminate(pid)
    options = record.options(data_dir)
    nats, postgres = _servers(options, data_dir)
    environment = _service_environment(options, data_dir, nats.url, postgres.url)
    _start_service(name, environment, data_dir, record)
    _wait_until_ready(data_dir, record, [name])


def _servers(options: ClusterOptions, data_dir: Path) -> tuple[NatsServer, PostgresServer]:
    logs = data_dir / "logs"
    return (
        NatsServer(data_dir / "nats", options.nats_port, logs / "nats-server.log"),
        PostgresServer(data_dir / "postgres", options.postgres_port, logs / "postgres.log"),
    )


def _start_service(name: str, environment: dict[str, str], data_dir: Path, record: ClusterRecord) -> None:
    (data_dir / "run" / f"{name}.ready").unlink(missing_ok=True)
    record.pids[name] = _spawn_service(name, environment, data_dir)
    record.save(data_dir)


def _postgres_pid(pg_data: Path) -> int:
    return int((pg_data / "postmaster.pid").read_text().split()[0])


def _ensure_database(server_url: str) -> None:
    import asyncio

    import asyncpg

    async def create() -> None:
        connection = await asyncpg.connect(server_url)
        try:
            exists = await connection.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", DATABASE)
            if not exists:
                await connection.execute(f'CREATE DATABASE "{DATABASE}"')
        finally:
            await connection.close()

    asyncio.run(create())


def _cluster_identity(data_dir: Path) -> tuple[str, str]:
    """The cluster id and token secret, made once and kept with the data."""
    secret_file = data_dir / "cluster.secret"
    if not secret_file.exists():
        secret_file.write_text(json.dumps({"cluster_id": str(uuid.uuid4()), "secret": secrets.token_hex(32)}))
        secret_file.chmod(0o600)
    identity = json.loads(secret_file.read_text())
    return identity["cluster_id"], identity["secret"]


def _service_environment(options: ClusterOptions, data_dir: Path, nats_url: str, pg_url: str) -> dict[str, str]:
    cluster_id, secret = _cluster_identity(data_dir)
    environment = {
        key: value for key, value in os.environ.items() if not key.startswith("DET_")
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
        PYTHONUNBUFFERED="1",
    )
    if not options.gpu:
        environment["DET_AGENT_GPUS"] = "0"
    if options.fork_trials:
        environment.update(DET_AGENT_FORK_SERVER="1", DET_AGENT_PRELOAD=options.preload)
    return environment


def _spawn_service(name: str, environment: dict[str, str], data_dir: Path) -> int:
    log_file = data_dir / "logs" / f"{name}.log"
    service_environment = dict(
        environment,
        DET_LOG_FILE=str(log_file),
        DET_READY_FILE=str(data_dir / "run" / f"{name}.ready"),
    )
    with open(log_file, "ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", f"services.{name}"],
            env=service_environment,
            cwd=data_dir,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return process.pid


def _wait_until_ready(data_dir: Path, record: ClusterRecord, names: Iterable[str]) -> None:
    deadline = time.monotonic() + READY_DEADLINE_S
    waiting = list(names)
    while waiting:
        for name in list(waiting):
            if (data_dir / "run" / f"{name}.ready").exists():
                waiting.remove(name)
            elif not process_alive(record.pids[name]):
                raise DeployError(_failure(data_dir, name, "exited during start-up"))
        if time.monotonic() > deadline:
            raise DeployError(_failure(data_dir, waiting[0], f"was not ready after {READY_DEADLINE_S:.0f} s"))
        time.sleep(0.05)


def _failure(data_dir: Path, name: str, what: str) -> str:
    log_file = data_dir / "logs" / f"{name}.log"
    return f"the {name} service {what}; the end of {log_file}:\n{tail(log_file)}"


def cluster_down(data_dir: Path) -> bool:
    """Stops every part; False when no cluster was running there."""
    data_dir = data_dir.expanduser().resolve()
    record = ClusterRecord.load(data_dir)
    if record is None:
        return False
    _stop(data_dir, record)
    return True


def _stop(data_dir: Path, record: ClusterRecord) -> None:
    # Services first (the agent stops its trials), then the servers under them.
    order = [*reversed(SERVICES), "nats-server"]
    for name in order:
        pid = record.pids.get(name)
        if pid is not None and process_alive(pid):
            _terminate(pid)
    if "postgres" in record.pids:
        _servers(record.options(data_dir), data_dir)[1].stop()
    ClusterRecord.path(data_dir).unlink(missing_ok=True)
    for ready in (data_dir / "run").glob("*.ready"):
        ready.unlink()


def _terminate(pid: int) -> None:
    _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_DEADLINE_S
    while process_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if process_alive(pid):
        _signal(pid, signal.SIGKILL)


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass
