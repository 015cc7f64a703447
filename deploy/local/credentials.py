"""The credentials that guard a local cluster's event log and read models.

Made once, at the first cluster-up of a data folder (or the first of this
version in an older folder), and kept in <data dir>/credentials.json (0600);
never in the event log or a log line. Each part gets only its own, in its
environment (cluster.py):

- nats-server: one user per part (NATS_USERS; every agent part, here or on
  another machine, is `agent`, whose password is also in cluster.secret, the
  file a remote agent's operator copies), and `operator` for the tools that
  read the log (`python -m services.eventlog`). A connection without a user
  is refused. What each may publish and subscribe to is `permissions`: a
  part appends only the subject kinds of the events it decides (APPENDS,
  from docs/CONTRACTS.md "Who appends what"); `operator` appends nothing.
  Reading is not narrowed by kind: every user may read the whole log (an
  ephemeral consumer's subject names no filter nats-server could check);
  what guards the log is that nobody writes what is not theirs.
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

CREDENTIALS_FILE = "credentials.json"
NATS_USERS = ("gateway", "scheduler", "searcher", "checkpoint", "agent", "operator")
SUPERUSER = "postgres"
DATABASE_ROLE = "gateway"
# nats-server checks a bcrypt hash at each connection: cost 10 takes ~50 ms.
BCRYPT_ROUNDS = 10
SCRAM_ITERATIONS = 4096

# The event types each part appends (docs/CONTRACTS.md, "Who appends what"); it may publish
# on the subject kinds of these (SUBJECT_KINDS) and no other. The gateway appends for users
# and for trials, of nearly every kind: it may publish on every events subject.
APPENDS: dict[str, tuple[str, ...]] = {
    "searcher": (
        "trial_created", "trial_length_set", "trial_stop_requested", "trial_ended",
        "experiment_progress_changed", "experiment_state_changed",
        "allocation_requested", "allocation_stop_requested", "allocation_kill_requested",
    ),
    "scheduler": (
        "allocation_assigned", "allocation_canceled", "allocation_stop_requested", "allocation_kill_requested",
        "allocation_exited", "agent_lost",
    ),
    "checkpoint": (
        "checkpoint_deletion_requested", "checkpoint_deleted", "checkpoint_partially_deleted",
        "experiment_deleted", "experiment_delete_failed",
    ),
    "agent": ("agent_registered", "allocation_started", "allocation_exited", "allocation_resources_exited"),
}

# What reading the log takes: stream and consumer lookups, consumers (ordered push ones
# deliver to the user's inbox), pull requests, single-message gets, acks and flow control.
_READ_API = (
    "$JS.API.INFO", "$JS.API.STREAM.NAMES", "$JS.API.STREAM.LIST", "$JS.API.STREAM.INFO.*",
    "$JS.API.STREAM.MSG.GET.*", "$JS.API.DIRECT.GET.>", "$JS.API.CONSUMER.CREATE.>",
    "$JS.API.CONSUMER.MSG.NEXT.>", "$JS.API.CONSUMER.INFO.>", "$JS.API.CONSUMER.DELETE.>",
    "$JS.ACK.>", "$JS.FC.>",
)


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

    def nats_user(self, part: str) -> NatsUser:
        """The user a part connects as: its own, `agent` for every agent part."""
        return self.nats[nats_user_of(part)]

    def database_url(self, port: int, database: str) -> str:
        """The gateway's DET_DATABASE_URL (its role, its password)."""
        return f"postgresql://{DATABASE_ROLE}:{self.gateway_password}@127.0.0.1:{port}/{database}"


def nats_user_of(part: str) -> str:
    """`agent` for agent parts (agent, agent-1, agent-far-away, ...), else the part's name."""
    return "agent" if part == "agent" or part.startswith("agent-") else part


def credentials(data_dir: Path) -> Credentials:
    """The folder's credentials; those missing (a new folder, an older file) are made now."""
    path = data_dir / CREDENTIALS_FILE
    stored = _read(path)
    completed = _completed(stored)
    if completed != stored:
        write_private(path, json.dumps(completed, indent=2))
    nats = {name: NatsUser(name, entry["password"], entry["bcrypt"]) for name, entry in completed["nats"].items()}
    postgres = completed["postgres"]
    return Credentials(nats, postgres[SUPERUSER], postgres[DATABASE_ROLE])


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


def _completed(stored: dict[str, Any]) -> dict[str, Any]:
    """`stored` with a password for every user and role it lacks."""
    nats = dict(stored.get("nats", {}))
    for name in NATS_USERS:
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
    """What `user` may publish and subscribe to on a cluster whose namespace is `namespace`
    (stream names as EventStore makes them). Each user's inbox is `_INBOX.<user>.`
    (services/common/connection.py), so none reads the answers another part gets."""
    suffix = "" if namespace == "det" else f"_{namespace}"
    inbox = (f"_INBOX.{user}.>",)
    if user == "operator":
        return Permissions(_READ_API, inbox)
    streams = (f"EVENTS{suffix}", f"LOGS{suffix}", f"OBJ_contexts{suffix}", f"KV_snapshots{suffix}")
    # Every part makes the streams it finds missing at start (a create of one that exists changes nothing).
    publish = _READ_API + tuple(f"$JS.API.STREAM.CREATE.{stream}" for stream in streams)
    if user == "gateway":
        publish += (
            f"{namespace}.events.>", f"$O.contexts{suffix}.>",
            f"$JS.API.STREAM.UPDATE.{streams[0]}", f"$JS.API.STREAM.UPDATE.{streams[1]}",
            f"$JS.API.STREAM.PURGE.{streams[2]}",
        )
        return Permissions(publish, inbox)
    kinds = sorted({SUBJECT_KINDS[event_type] for event_type in APPENDS[user]})
    publish += tuple(f"{namespace}.events.{kind}.>" for kind in kinds)
    if user == "agent":
        publish += (f"{namespace}.logs.>", f"{namespace}.heartbeats.>")  # an agent id may hold dots
    else:
        # Its own snapshots (services/common/snapshots.py: key <service>.<core>); the gateway reads the scheduler's.
        publish += (f"$KV.snapshots{suffix}.{user}.>",)
    subscribe = inbox + ((f"{namespace}.heartbeats.>",) if user == "scheduler" else ())
    return Permissions(publish, subscribe)


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
