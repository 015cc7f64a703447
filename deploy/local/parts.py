"""How the supervisor runs each part of a local cluster: the command, where
its output goes, when it is ready, the signal that asks it to stop, the files
that hold its logs and the paths its disk use counts.

    part          ready when                        stop signal   output file
    nats-server   its port answers                  SIGTERM       logs/nats-server.out
    postgres      it accepts connections, the       SIGINT (fast  logs/postgres.log
                  gateway's role and the            shutdown)
                  `determined` database exist and
                  every connection needs a password
    a service     it wrote run/<name>.ready         SIGTERM       logs/<name>.out
                  (a replay's gateway: python -m deploy.local.replay_gateway, replay_home.py)
    an agent      it wrote run/<part>.ready         SIGTERM       logs/<part>.out
                  (python -m services.agent, with its AgentSpec's id, slots, pool and folder)

nats-server writes its own log (logs/nats-server.log, rotated by itself) and
each service its own (logs/<name>.log, DET_LOG_FILE, rotated by itself); the
output files get what they print besides (start-up errors, tracebacks) and
are rotated by the supervisor (logrotate.py).

Each part logs in to nats-server as its own user and the gateway to PostgreSQL
as its own role (credentials.py); the database step (`_database_ready`) makes
that role and, in a folder made before credentials, sets the superuser's
password and stops trusting connections.
"""

import asyncio
import signal
import socket
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from deploy.local import initial_password, replay_home
from deploy.local.cluster import (
    DATABASE,
    AgentSpec,
    ClusterRecord,
    agent_environment,
    agent_work_dir,
    part_credentials,
    recorded_cluster_id,
    remote_environment,
    service_environment,
)
from deploy.local.credentials import (
    DATABASE_ROLE,
    SUPERUSER,
    Credentials,
    authorization_config,
    credentials,
    scram_verifier,
)
from deploy.local.servers import NatsServer, PostgresServer, tail
from deploy.local.tls import nats_tls
from deploy.local.trial_home import TRIAL_USER_SETTING, make_work_dir, prepare_folders

if TYPE_CHECKING:
    import asyncpg

STOP_SIGNALS = {"postgres": signal.SIGINT}
# The gateway's schema (services/gateway/read_models.py); named here so that the supervisor
# does not import the gateway.
READ_MODEL_SCHEMA = "read_model"
LAST_ERROR_LINES = 10


def cluster_nats(data_dir: Path, record: ClusterRecord, found: Credentials | None) -> NatsServer:
    """The nats-server of the cluster in `data_dir`, letting in the users `found` holds
    (none: a folder of agents for a cluster elsewhere runs no nats-server)."""
    listen = "0.0.0.0" if record.advertise_host else "127.0.0.1"
    return NatsServer(
        data_dir / "nats",
        record.nats_port,
        data_dir / "logs" / "nats-server.log",
        listen,
        authorization=authorization_config(found.nats if found is not None else {}),
        tls=nats_tls(record.tls_cert, record.tls_key, listen),
    )


class PartRunner:
    """The I/O of starting and checking the parts of the cluster in `data_dir`."""

    def __init__(self, data_dir: Path, record: ClusterRecord) -> None:
        self.data_dir = data_dir
        self.logs = data_dir / "logs"
        self.postgres_data = record.postgres_folder(data_dir)
        remote = record.remote_cluster()
        # A folder of agents for a cluster elsewhere logs in with what its agent's secret file gave it.
        agent_ids = [agent.agent_id for agent in record.agent_specs()]
        self.credentials = credentials(data_dir, agent_ids) if remote is None else None
        self.nats = cluster_nats(data_dir, record, self.credentials)
        self.postgres = PostgresServer(
            self.postgres_data,
            record.postgres_port,
            self.logs / "postgres.log",
            superuser_password=self.credentials.postgres_password if self.credentials is not None else "",
        )
        options = record.options(data_dir)
        self.environment = (
            remote_environment(options, data_dir, remote)
            if remote is not None
            else service_environment(options, data_dir, self.nats.url)
        )
        # Where a gang's other workers reach this machine's agents: the advertised
        # address; else, in a cluster of this machine only, loopback; else (an agent
        # for a cluster elsewhere) its host name.
        self.agent_address = record.advertise_host or ("" if remote is not None else "127.0.0.1")
        self.agents = {agent.part: agent for agent in record.agent_specs()}
        checkpoints = self.environment.get("DET_CHECKPOINT_PATH")
        prepare_folders(
            data_dir,
            recorded_cluster_id(data_dir),
            Path(checkpoints) if checkpoints else None,
            self.environment.get(TRIAL_USER_SETTING, ""),
        )

    def add_agent(self, agent: AgentSpec) -> None:
        """Runs `agent` from now on; in a cluster, with a nats-server user of its own,
        which the running nats-server lets in before this returns."""
        self.agents[agent.part] = agent
        if self.credentials is not None:
            self.credentials = credentials(self.data_dir, [agent.agent_id])
            self.nats.authorization = authorization_config(self.credentials.nats)
            user = self.credentials.nats_user(agent.part, agent.agent_id)
            self.nats.reload(user.name, user.password)

    def remove_agent(self, part: str) -> None:
        self.agents.pop(part, None)

    def spawn(self, name: str) -> "subprocess.Popen[bytes]":
        """Starts the part (its own session) and returns at once; ServerError
        or OSError when it cannot be started at all."""
        self.ready_file(name).unlink(missing_ok=True)
        with open(self.output_file(name), "ab") as output:
            if name == "nats-server":
                if self.credentials is not None:  # with the users added since (agent secret files)
                    self.nats.authorization = authorization_config(credentials(self.data_dir).nats)
                return self.nats.spawn(output)
            if name == "postgres":
                return self.postgres.spawn(output)
            environment, module = self.environment, f"services.{name}"
            if self.credentials is not None:
                agent_id = self.agents[name].agent_id if name in self.agents else ""
                login = part_credentials(name, self.data_dir, self.postgres.port, agent_id)
                environment = dict(environment, **login)
            if name == "gateway":
                environment = dict(environment, **initial_password.gateway_environment(self.data_dir))
                replay = replay_home.gateway_environment(self.data_dir)
                if replay:  # it loads its bundle, then serves, read-only
                    environment, module = dict(environment, **replay), replay_home.GATEWAY_MODULE
            if name in self.agents:
                agent = self.agents[name]
                environment, module = (
                    agent_environment(environment, agent, self.data_dir, self.agent_address),
                    "services.agent",
                )
                make_work_dir(
                    agent_work_dir(self.data_dir, name), self.data_dir, recorded_cluster_id(self.data_dir)
                )
            return subprocess.Popen(
                [sys.executable, "-m", module],
                env=dict(
                    environment,
                    DET_LOG_FILE=str(self.logs / f"{name}.log"),
                    DET_READY_FILE=str(self.ready_file(name)),
                ),
                cwd=self.data_dir,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def ready(self, name: str) -> bool:
        if name == "nats-server":
            return port_answers(self.nats.port)
        if name == "postgres":
            return (
                self.postgres.accepting()
                and self.credentials is not None
                and _database_ready(self.postgres, self.credentials)
            )
        return self.ready_file(name).exists()

    def ready_file(self, name: str) -> Path:
        return self.data_dir / "run" / f"{name}.ready"

    def output_file(self, name: str) -> Path:
        return self.logs / output_name(name)

    def stopped(self, name: str) -> None:
        """After the part's process ended: it is no longer ready."""
        self.ready_file(name).unlink(missing_ok=True)

    def last_words(self, name: str) -> str:
        return last_words(self.logs, name)

    def disk_paths(self, name: str) -> list[Path]:
        """What the part's data and logs take on disk."""
        logs = sorted(self.logs.glob(f"{name}.log*")) + sorted(self.logs.glob(f"{name}.out*"))
        own = {"nats-server": [self.data_dir / "nats"], "postgres": [self.postgres_data]}
        if name in self.agents:
            return [agent_work_dir(self.data_dir, name), *logs]
        return own.get(name, []) + logs

    def output_files(self, names: Iterable[str]) -> list[Path]:
        """The files the supervisor rotates (see logrotate.py) of these parts."""
        return [self.output_file(name) for name in names]


def last_words(logs: Path, name: str) -> str:
    """The end of the part's log that changed last (its output file holds a
    crash's traceback, its own log the lines before)."""
    candidates = [
        path
        for path in (logs / output_name(name), logs / f"{name}.log")
        if path.exists() and path.stat().st_size > 0
    ]
    if not candidates:
        return f"(nothing in {logs / output_name(name)})"
    latest = max(candidates, key=lambda path: path.stat().st_mtime)
    return f"the end of {latest}:\n{tail(latest, LAST_ERROR_LINES)}"


def output_name(name: str) -> str:
    """The file in logs/ that gets what the part prints on stdout and stderr."""
    return "postgres.log" if name == "postgres" else f"{name}.out"


def port_answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def _database_ready(postgres: PostgresServer, found: Credentials) -> bool:
    """Makes the gateway's role and the cluster's database if missing and has every
    connection give a password; False when PostgreSQL does not answer yet."""
    import asyncpg

    try:
        asyncio.run(_prepare_database(postgres, found))
    except (TimeoutError, OSError, asyncpg.PostgresError):
        return False
    return True


async def _prepare_database(postgres: PostgresServer, found: Credentials) -> None:
    """As the superuser. Passwords are given as SCRAM verifiers, so that no statement
    (logged by PostgreSQL when it fails) holds one. A folder made before credentials
    (pg_hba `trust`) lets the superuser in without its password: it is set first, and
    pg_hba is changed after, so the supervisor is never locked out."""
    import asyncpg

    server = await asyncpg.connect(postgres.url, password=found.postgres_password, timeout=2.0)
    try:
        await server.execute(f"ALTER ROLE {SUPERUSER} PASSWORD '{scram_verifier(found.postgres_password)}'")
        await _ensure_gateway_role(server, found.gateway_password)
        owner = await server.fetchval(
            "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = $1", DATABASE
        )
        if owner is None:
            await server.execute(f'CREATE DATABASE "{DATABASE}" OWNER {DATABASE_ROLE}')
        elif owner != DATABASE_ROLE:
            await server.execute(f'ALTER DATABASE "{DATABASE}" OWNER TO {DATABASE_ROLE}')
        await _drop_foreign_read_models(postgres, found)
        if postgres.require_passwords():
            await server.execute("SELECT pg_reload_conf()")
    finally:
        await server.close()


async def _ensure_gateway_role(server: "asyncpg.Connection", password: str) -> None:
    verifier = scram_verifier(password)
    if await server.fetchval("SELECT 1 FROM pg_roles WHERE rolname = $1", DATABASE_ROLE):
        await server.execute(f"ALTER ROLE {DATABASE_ROLE} LOGIN NOSUPERUSER PASSWORD '{verifier}'")
    else:
        await server.execute(
            f"CREATE ROLE {DATABASE_ROLE} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD '{verifier}'"
        )


async def _drop_foreign_read_models(postgres: PostgresServer, found: Credentials) -> None:
    """The read models an older version made as the superuser, which the gateway's role
    could neither change nor drop: dropped, so that the gateway rebuilds them from the log."""
    import asyncpg

    url = postgres.url.rsplit("/", 1)[0] + f"/{DATABASE}"
    database = await asyncpg.connect(url, password=found.postgres_password, timeout=2.0)
    try:
        owner = await database.fetchval(
            "SELECT pg_get_userbyid(nspowner) FROM pg_namespace WHERE nspname = $1", READ_MODEL_SCHEMA
        )
        if owner not in (None, DATABASE_ROLE):
            await database.execute(f"DROP SCHEMA {READ_MODEL_SCHEMA} CASCADE")
    finally:
        await database.close()
