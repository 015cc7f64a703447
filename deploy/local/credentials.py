"""The credentials that guard a local cluster's event log and read models.

Made once, at the first cluster-up of a data folder (or the first of this
version in an older folder), and kept in <data dir>/credentials.json (0600);
never in the event log or a log line. Each part gets only its own, in its
environment (cluster.py):

- nats-server: one user per service (NATS_USERS), one per agent
  (`agent:<agent id>`, made by cluster-up and agent-up: `agent_user`; a
  remote agent's operator copies that agent's secret file, cluster.py
  `agent_secret_file`), and `operator` for the tools that read the log
  (`python -m services.eventlog`). A connection without a user is refused.
  What each may publish and subscribe to is `permissions`: a part appends
  only the subject kinds of the events it decides (APPENDS, from
  docs/CONTRACTS.md "Who appends what"), an agent only on its own agent
  subject; `operator` appends nothing. A part reads only the subject kinds
  its cores fold (READS): it may create a consumer only through the API
  subject that names the consumer's one filter
  (`$JS.API.CONSUMER.CREATE.<stream>.<name>.<filter>`, which nats-server
  checks against the consumer's config) and get single events only through
  `$JS.API.DIRECT.GET.<stream>.<subject>`; the gateway and `operator` read
  everything (the gateway alone folds `user` events, with their password
  hashes). An older folder's shared `agent` user is dropped at its next
  cluster-up (the agents there get their own).
- PostgreSQL: the superuser `postgres`, used by the supervisor's database
  step only, and the role `gateway` (DATABASE_ROLE), not a superuser, owner
  of the `determined` database, whose password is in the gateway's
  DET_DATABASE_URL.

The servers hold verifiers only: nats-server's config the bcrypt hash of each
password, PostgreSQL the SCRAM-SHA-256 verifier (`scram_verifier`) given to
ALTER ROLE, so no password is in a config file or a server's statement log.
"""

import base64
import hashlib
import hmac
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bcrypt

from services.common.envelope import SUBJECT_KINDS
from services.common.ownership import APPENDS, READS
from services.common.settings import inbox_prefix

CREDENTIALS_FILE = "credentials.json"
NATS_USERS = ("gateway", "scheduler", "searcher", "checkpoint", "operator")
# An agent's nats-server user is this and its agent id (agent ids hold no ':').
AGENT_USER_PREFIX = "agent:"
# The one nats-server user every agent shared before each got its own: dropped.
SHARED_AGENT_USER = "agent"
SUPERUSER = "postgres"
DATABASE_ROLE = "gateway"
# nats-server checks a bcrypt hash at each connection: cost 10 takes ~50 ms.
BCRYPT_ROUNDS = 10
SCRAM_ITERATIONS = 4096

# What reading the log takes, whatever is read: stream lookups, pull requests on a
# consumer it made (by a name no other part knows), consumer lookups and deletes, acks
# and flow control of ordered push consumers (which deliver to the user's inbox).
_READ_API = (
    "$JS.API.INFO",
    "$JS.API.STREAM.NAMES",
    "$JS.API.STREAM.LIST",
    "$JS.API.STREAM.INFO.*",
    "$JS.API.CONSUMER.MSG.NEXT.>",
    "$JS.API.CONSUMER.INFO.>",
    "$JS.API.CONSUMER.DELETE.>",
    "$JS.ACK.>",
    "$JS.FC.>",
)
# Reading every stream, with any consumer and any single-message get (the gateway, operator).
_READ_ALL = ("$JS.API.STREAM.MSG.GET.*", "$JS.API.DIRECT.GET.>", "$JS.API.CONSUMER.CREATE.>")


class CredentialsError(Exception):
    """The credentials file cannot be read: the message says which and why."""


@dataclass(frozen=True)
class NatsUser:
    name: str
    password: str
    # bcrypt of the password: what nats-server's config holds.
    password_hash: str


@dataclass(frozen=True)
class Permissions:
    publish: tuple[str, ...]
    subscribe: tuple[str, ...]


@dataclass(frozen=True)
class Credentials:
    nats: dict[str, NatsUser]
    postgres_password: str
    gateway_password: str

    def nats_user(self, part: str, agent_id: str = "") -> NatsUser:
        """The user a part connects as: its own; an agent part's is its agent's."""
        return self.nats[nats_user_of(part, agent_id)]

    def database_url(self, port: int, database: str) -> str:
        """The gateway's DET_DATABASE_URL (its role, its password)."""
        return f"postgresql://{DATABASE_ROLE}:{self.gateway_password}@127.0.0.1:{port}/{database}"


def is_agent_part(part: str) -> bool:
    """agent, agent-1, agent-far-away, ..."""
    return part == "agent" or part.startswith("agent-")


def agent_user(agent_id: str) -> str:
    """The nats-server user of the agent `agent_id`."""
    return f"{AGENT_USER_PREFIX}{agent_id}"


def nats_user_of(part: str, agent_id: str = "") -> str:
    """An agent part's agent's user (its agent id is needed), else the part's name."""
    if not is_agent_part(part):
        return part
    if not agent_id:
        raise CredentialsError(f"the agent part {part} has no agent id: its nats-server user is unknown")
    return agent_user(agent_id)


def credentials(data_dir: Path, agent_ids: tuple[str, ...] | list[str] = ()) -> Credentials:
    """The folder's credentials, with a user for each of `agent_ids`; those missing (a new
    folder, an older file, a new agent) are made now, and an older file's shared `agent`
    user is dropped."""
    path = data_dir / CREDENTIALS_FILE
    stored = _read(path)
    completed = _completed(stored, [agent_user(agent_id) for agent_id in agent_ids])
    if completed != stored:
        write_private(path, json.dumps(completed, indent=2))
    nats = {
        name: NatsUser(name, entry["password"], entry["bcrypt"]) for name, entry in completed["nats"].items()
    }
    postgres = completed["postgres"]
    return Credentials(nats, postgres[SUPERUSER], postgres[DATABASE_ROLE])


def without_agent(data_dir: Path, agent_id: str) -> NatsUser | None:
    """Removes the agent's nats-server user from the folder's credentials; the user it was
    (None: there was none). Its password is then good for nothing once nats-server reloads."""
    path = data_dir / CREDENTIALS_FILE
    stored = _read(path)
    entry = stored.get("nats", {}).get(agent_user(agent_id))
    if entry is None:
        return None
    nats = {name: value for name, value in stored["nats"].items() if name != agent_user(agent_id)}
    write_private(path, json.dumps(dict(stored, nats=nats), indent=2))
    return NatsUser(agent_user(agent_id), entry["password"], entry["bcrypt"])


def _read(path: Path) -> dict[str, Any]:
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as error:
        raise CredentialsError(f"cannot read {path}: {error}") from error
    if not isinstance(document, dict):
        raise CredentialsError(f"{path} is not a JSON object")
    return document


def _completed(stored: dict[str, Any], agent_users: list[str]) -> dict[str, Any]:
    """`stored` with a password for every user and role it lacks, without the shared agent user."""
    nats = {name: entry for name, entry in stored.get("nats", {}).items() if name != SHARED_AGENT_USER}
    for name in (*NATS_USERS, *agent_users):
        if name not in nats:
            password = new_password()
            nats[name] = {"password": password, "bcrypt": bcrypt_hash(password)}
    postgres = dict(stored.get("postgres", {}))
    for role in (SUPERUSER, DATABASE_ROLE):
        postgres.setdefault(role, new_password())
    return dict(stored, nats=nats, postgres=postgres)


def new_password() -> str:
    """URL-safe, so that it can stand in a database URL as it is."""
    return secrets.token_urlsafe(24)


def bcrypt_hash(password: str) -> str:
    # "2a": the prefix nats-server's documentation uses (Go's bcrypt reads it).
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(BCRYPT_ROUNDS, prefix=b"2a")).decode()


def scram_verifier(password: str, salt: bytes | None = None, iterations: int = SCRAM_ITERATIONS) -> str:
    """PostgreSQL's SCRAM-SHA-256 verifier of `password` (RFC 5803), which ALTER ROLE
    ... PASSWORD stores as it is: the password itself never reaches the server."""
    salt = salt if salt is not None else secrets.token_bytes(16)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    server_key = hmac.new(salted, b"Server Key", "sha256").digest()
    stored_key = hashlib.sha256(client_key).digest()
    encoded = [base64.b64encode(value).decode() for value in (salt, stored_key, server_key)]
    return f"SCRAM-SHA-256${iterations}:{encoded[0]}${encoded[1]}:{encoded[2]}"


def write_private(path: Path, text: str) -> None:
    """Writes `text` to `path` (mode 0600 from the start), replacing it whole."""
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    partial.unlink(missing_ok=True)
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(text)
    partial.replace(path)


# -- nats-server ------------------------------------------------------------------------


def permissions(user: str, namespace: str = "det") -> Permissions:
    """What `user` (a service's name, an agent's `agent:<id>`, operator) may publish and
    subscribe to on a cluster whose namespace is `namespace` (stream names as EventStore
    makes them). Each user's inbox is `_INBOX.<token>.` (services/common/settings.py
    `inbox_prefix`), so none reads the answers another part gets."""
    suffix = "" if namespace == "det" else f"_{namespace}"
    inbox = (f"{inbox_prefix(user)}.>",)
    if user == "operator":
        return Permissions(_READ_API + _READ_ALL, inbox)
    streams = (f"EVENTS{suffix}", f"LOGS{suffix}", f"OBJ_contexts{suffix}", f"KV_snapshots{suffix}")
    # Every part makes the streams it finds missing at start (a create of one that exists changes nothing).
    publish = _READ_API + tuple(f"$JS.API.STREAM.CREATE.{stream}" for stream in streams)
    if user == "gateway":
        publish += _READ_ALL + (
            f"{namespace}.events.>",
            f"$O.contexts{suffix}.>",
            f"$JS.API.STREAM.UPDATE.{streams[0]}",
            f"$JS.API.STREAM.UPDATE.{streams[1]}",
            f"$JS.API.STREAM.PURGE.{streams[2]}",
            # /metrics: each reader's lag, from the events stream's consumers (no event in it).
            f"$JS.API.CONSUMER.LIST.{streams[0]}",
        )
        return Permissions(publish, inbox)
    agent_id = user.removeprefix(AGENT_USER_PREFIX) if user.startswith(AGENT_USER_PREFIX) else ""
    part = "agent" if agent_id else user
    publish += _reads(READS[part], namespace, streams[0])
    if agent_id:
        # Its own agent events; allocation events and trials' logs (whose subjects name
        # no agent) of any agent; its own heartbeats; the contexts it runs.
        publish += (
            f"{namespace}.events.agent.{agent_id}",
            f"{namespace}.events.allocation.>",
            f"{namespace}.logs.>",
            f"{namespace}.heartbeats.{agent_id}",
            f"$JS.API.STREAM.MSG.GET.{streams[2]}",
            f"$JS.API.CONSUMER.CREATE.{streams[2]}",
            f"$JS.API.CONSUMER.CREATE.{streams[2]}.>",
        )
        return Permissions(publish, inbox)
    kinds = sorted({SUBJECT_KINDS[event_type] for event_type in APPENDS[user]})
    publish += tuple(f"{namespace}.events.{kind}.>" for kind in kinds)
    # Snapshots (services/common/snapshots.py, key <service>.<core>): a service writes its
    # own and may read any (none holds a user's data); an agent keeps none.
    publish += (
        f"$KV.snapshots{suffix}.{user}.>",
        f"$JS.API.STREAM.MSG.GET.{streams[3]}",
        f"$JS.API.DIRECT.GET.{streams[3]}.>",
    )
    subscribe: tuple[str, ...] = inbox
    if user == "scheduler":
        # Agents' heartbeats; the job queue it publishes (services/common/job_queue.py) in a
        # bucket of its own, which only the scheduler writes (the gateway reads every stream).
        subscribe += (f"{namespace}.heartbeats.>",)
        publish += (f"$JS.API.STREAM.CREATE.KV_job_queue{suffix}", f"$KV.job_queue{suffix}.>")
    return Permissions(publish, subscribe)


def _reads(kinds: tuple[str, ...], namespace: str, stream: str) -> tuple[str, ...]:
    """Reading these kinds of events: consumers whose one filter is within them, and
    single-event gets of their subjects."""
    allowed: tuple[str, ...] = ()
    for kind in kinds:
        subjects = f"{namespace}.events.{kind}.>"
        allowed += (
            f"$JS.API.CONSUMER.CREATE.{stream}.*.{subjects}",
            f"$JS.API.DIRECT.GET.{stream}.{subjects}",
        )
    return allowed


def authorization_config(users: dict[str, NatsUser], namespace: str = "det") -> str:
    """nats-server's `authorization` block: every user with its bcrypt hash and permissions."""
    entries = []
    for user in users.values():
        allowed = permissions(user.name, namespace)
        entries.append(
            f"    {{user: {_quoted(user.name)}, password: {_quoted(user.password_hash)}, permissions: {{"
            f"publish: {{allow: {_list(allowed.publish)}}}, subscribe: {{allow: {_list(allowed.subscribe)}}}}}}}"
        )
    return "authorization {\n  users = [\n" + "\n".join(entries) + "\n  ]\n}\n"


def _list(subjects: tuple[str, ...]) -> str:
    return "[" + ", ".join(_quoted(subject) for subject in subjects) + "]"


def _quoted(value: str) -> str:
    # A quoted string is taken as it is ("$JS..." is no variable, a bcrypt hash's "$" neither).
    return json.dumps(value)
