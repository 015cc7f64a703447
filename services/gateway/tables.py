"""The read models: SQLAlchemy Core metadata of the tables the projector fills
and the queries read, all in one PostgreSQL schema so that a rebuild is
`DROP SCHEMA read_model CASCADE` and a replay from sequence 1.

The statements are compiled from this metadata to SQL text and run through
asyncpg (the projector's hot paths need asyncpg's executemany; see
INFRA-NOTES). Times are the events' `occurred_at_ns` (or the reported time a
trial put in the event), never the clock of the projector, so a rebuild gives
identical rows.
"""

import contextlib
import hashlib
from collections.abc import AsyncIterator

import asyncpg
from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Double,
    Index,
    Integer,
    MetaData,
    Table,
    Text,
    text,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.schema import CreateIndex, CreateTable

SCHEMA = "read_model"


class ConnectionLostError(Exception):
    """The connection closed under a transaction (asyncpg says only
    InterfaceError: "the underlying connection is closed"; see `transaction`)."""


# What asyncpg raises when PostgreSQL cannot be reached or went away, as
# opposed to an error of a statement: the read models are unavailable for now.
POSTGRES_DOWN: tuple[type[BaseException], ...] = (
    ConnectionLostError,
    OSError,
    TimeoutError,
    asyncpg.PostgresConnectionError,
    asyncpg.exceptions.CannotConnectNowError,
    asyncpg.exceptions.AdminShutdownError,
    asyncpg.exceptions.CrashShutdownError,
    # asyncpg's protocol state broken by a connection cut mid-operation (seen creating the schema
    # while PostgreSQL went down): retried like the rest.
    asyncpg.exceptions.InternalClientError,
)
# Serialises schema creation between gateways starting at the same time.
_SCHEMA_LOCK_KEY = 0x6465745F726D  # "det_rm"

metadata = MetaData(schema=SCHEMA)

experiments = Table(
    "experiments",
    metadata,
    Column("id", BigInteger, primary_key=True),
    Column("name", Text, nullable=False),
    Column("owner", Text, nullable=False),
    # Without the EXPERIMENT_STATE_ prefix: ACTIVE, PAUSED, STOPPING_KILLED, ...
    Column("state", Text, nullable=False),
    Column("started_at_ns", BigInteger, nullable=False),
    Column("ended_at_ns", BigInteger),
    Column("description", Text, nullable=False),
    Column("labels", JSONB, nullable=False),
    Column("resource_pool", Text, nullable=False),
    Column("searcher_name", Text, nullable=False),
    Column("searcher_metric", Text, nullable=False),
    Column("smaller_is_better", Boolean, nullable=False),
    Column("config_json", Text, nullable=False),
    Column("context_hash", Text, nullable=False),
    # Why it ended (e.g. which searcher it could not run); "" while running.
    Column("end_reason", Text, nullable=False, server_default=""),
    # The searcher's own progress (ExperimentProgressChanged); NULL until it
    # reports one, and the queries fall back on the trials' mean.
    Column("progress", Double),
    # The event ids of the deletions asked of it (`det experiment delete`; a
    # DELETE_FAILED one may be asked again), a set so that replaying a request
    # counts it once: their number numbers the next request's message id.
    Column("delete_requests", JSONB, nullable=False, server_default="[]"),
    # Why the last deletion left files behind (DELETE_FAILED); "" otherwise.
    Column("delete_error", Text, nullable=False, server_default=""),
    # The best value of the searcher metric (by smaller_is_better) over the
    # validations shown (not superseded); NULL before the first one. Kept by
    # the metric statements of projection.py, not by the row fold.
    Column("best_metric", Double),
)

trials = Table(
    "trials",
    metadata,
    Column("id", BigInteger, primary_key=True),
    Column("experiment_id", BigInteger, nullable=False),
    Column("request_id", Text, nullable=False),
    # ACTIVE until it ends; queries show RUNNING while its current allocation runs.
    Column("state", Text, nullable=False),
    Column("hparams_json", Text, nullable=False),
    Column("trial_seed", BigInteger, nullable=False),
    Column("started_at_ns", BigInteger, nullable=False),
    Column("ended_at_ns", BigInteger),
    Column("end_reason", Text, nullable=False),
    Column("progress", Double, nullable=False),
    Column("total_batches", BigInteger, nullable=False),
    # The newest run requested: its allocation, and its run id (= runs so far).
    Column("current_allocation_id", Text),
    Column("runs", Integer, nullable=False),
    # The rung the searcher promoted it to and the length it should train to.
    Column("rung", Integer, nullable=False),
    Column("searcher_length", BigInteger, nullable=False),
    # Why the searcher is done with it (TrialStopRequested); NULL while it is not.
    Column("stop_reason", Text),
    # What the trial last said it is doing (core_context.train.set_status).
    Column("status", Text, nullable=False),
    Column("kill_requested", Boolean, nullable=False),
    # Why the trial said it exits early (TrialEarlyExitReported: INVALID_HP or
    # USER_REQUESTED_STOP; the first report); NULL while it did not.
    Column("early_exit_reason", Text),
    # core_context.train.set_metadata(): a JSON object as text, so that it
    # reads back with the keys in the trial's order; "{}" until one is set.
    Column("metadata_json", Text, nullable=False, server_default="{}"),
    # Its best value of the searcher metric over its validations shown, as the
    # experiment's best_metric (the best of its trials'); kept the same way.
    Column("best_metric", Double),
    Index("trials_by_experiment", "experiment_id", "id"),
)

allocations = Table(
    "allocations",
    metadata,
    Column("allocation_id", Text, primary_key=True),
    Column("trial_id", BigInteger, nullable=False),
    Column("trial_run_id", Integer, nullable=False),
    Column("requested_at_ns", BigInteger, nullable=False),
    # Where its slots are, [{"agent_id": ..., "slot_ids": [...]}, ...] (one
    # entry per agent it spans); NULL until the scheduler assigns it.
    Column("placements", JSONB),
    Column("assigned_at_ns", BigInteger),
    Column("started_at_ns", BigInteger),
    # The first reason a graceful stop was asked for (searcher, pause, preemption).
    Column("stop_requested", Boolean, nullable=False),
    Column("stop_reason", Text),
    Column("stop_acknowledged", Boolean, nullable=False),
    # Withdrawn before it was assigned: nothing ran.
    Column("canceled", Boolean, nullable=False),
    Column("exited_at_ns", BigInteger),
    Column("exit_code", Integer),
    Column("killed", Boolean, nullable=False),
    Column("agent_lost", Boolean, nullable=False),
    Column("error", Text),
    Index("allocations_by_trial", "trial_id", "trial_run_id"),
    # What runs now (det slot list): the assigned allocations that have not exited.
    Index(
        "allocations_running",
        "allocation_id",
        postgresql_where=text("placements IS NOT NULL AND exited_at_ns IS NULL AND NOT canceled"),
    ),
)

metrics = Table(
    "metrics",
    metadata,
    Column("trial_id", BigInteger, primary_key=True),
    Column("group", Text, primary_key=True),
    Column("steps_completed", BigInteger, primary_key=True),
    Column("trial_run_id", Integer, primary_key=True),
    Column("metrics", JSONB, nullable=False),
    Column("reported_at_ns", BigInteger, nullable=False),
    # A later run resumed from a checkpoint before this point: the point was
    # trained again, so it is kept for the record but never shown.
    Column("superseded", Boolean, nullable=False),
)

checkpoints = Table(
    "checkpoints",
    metadata,
    Column("uuid", Text, primary_key=True),
    Column("trial_id", BigInteger, nullable=False),
    Column("experiment_id", BigInteger, nullable=False),
    Column("allocation_id", Text, nullable=False),
    Column("steps_completed", BigInteger, nullable=False),
    Column("metadata_json", Text, nullable=False),
    Column("resources", JSONB, nullable=False),
    Column("reported_at_ns", BigInteger, nullable=False),
    # COMPLETED, DELETING (a CheckpointDeletionRequested named it), DELETED or
    # PARTIALLY_DELETED (resources then lists what is left).
    Column("state", Text, nullable=False),
    # The newest deletion (CheckpointDeletionRequested.deletion_id, per
    # experiment) that named it; 0: none. An outcome of an older one changes nothing.
    Column("deletion_id", BigInteger, nullable=False, server_default="0"),
    # The storage's error when files it was asked to delete are left; "" otherwise.
    Column("delete_error", Text, nullable=False, server_default=""),
    Index("checkpoints_by_trial", "trial_id", "steps_completed"),
    Index("checkpoints_by_experiment", "experiment_id"),
)

# The model registry: one row per model (by name), one per version.
models = Table(
    "models",
    metadata,
    Column("name", Text, primary_key=True),
    Column("model_id", BigInteger, nullable=False),
    Column("description", Text, nullable=False),
    Column("metadata_json", Text, nullable=False),
    Column("labels", JSONB, nullable=False),
    Column("owner", Text, nullable=False),
    Column("created_at_ns", BigInteger, nullable=False),
    Index("models_by_id", "model_id"),
)

model_versions = Table(
    "model_versions",
    metadata,
    # "<model name>:<version>", as a checkpoint lists the versions it is registered as.
    Column("id", Text, primary_key=True),
    Column("model_name", Text, nullable=False),
    Column("model_id", BigInteger, nullable=False),
    Column("version", Integer, nullable=False),
    Column("checkpoint_uuid", Text, nullable=False),
    Column("experiment_id", BigInteger, nullable=False),
    Column("trial_id", BigInteger, nullable=False),
    Column("name", Text, nullable=False),
    Column("comment", Text, nullable=False),
    Column("owner", Text, nullable=False),
    Column("registered_at_ns", BigInteger, nullable=False),
    Index("model_versions_by_model", "model_name", "version"),
    Index("model_versions_by_checkpoint", "checkpoint_uuid"),
)

agents = Table(
    "agents",
    metadata,
    Column("agent_id", Text, primary_key=True),
    Column("hostname", Text, nullable=False),
    Column("slots", JSONB, nullable=False),
    Column("registered_at_ns", BigInteger, nullable=False),
    # "" (a registration from before pools) is the pool "default".
    Column("resource_pool", Text, nullable=False, server_default=""),
    # Where the other workers of a gang reach it ("": its hostname).
    Column("address", Text, nullable=False, server_default=""),
    # What an operator made of it: ENABLED, DISABLED (its work asked to stop) or
    # DRAINING (disabled, its work left to finish). Kept across registrations.
    Column("state", Text, nullable=False, server_default="ENABLED"),
    # The event id of its current registration, and whether the scheduler found
    # that registration lost (no heartbeat); a newer registration clears it.
    Column("registration_event_id", Text, nullable=False, server_default=""),
    Column("lost", Boolean, nullable=False, server_default="false"),
)

# Users and their logins. No password or hash: those stay in the events (and the
# gateway's memory), never in a column a query can return.
users = Table(
    "users",
    metadata,
    Column("user_id", BigInteger, primary_key=True),
    Column("username", Text, nullable=False),
    Column("display_name", Text, nullable=False),
    Column("admin", Boolean, nullable=False),
    Column("active", Boolean, nullable=False),
    Column("created_at_ns", BigInteger, nullable=False),
    # "user:<name>", or "cluster" for the built-in users.
    Column("created_by", Text, nullable=False),
    Column("password_changed_at_ns", BigInteger, nullable=False),
)

user_sessions = Table(
    "user_sessions",
    metadata,
    Column("session_id", Text, primary_key=True),
    Column("user_id", BigInteger, nullable=False),
    Column("started_at_ns", BigInteger, nullable=False),
    Column("expires_at_ns", BigInteger, nullable=False),
    # The logout; NULL while it was not ended so.
    Column("ended_at_ns", BigInteger),
    Index("user_sessions_by_user", "user_id"),
)

projection_position = Table(
    "projection_position",
    metadata,
    Column("name", Text, primary_key=True),
    Column("sequence", BigInteger, nullable=False),
)

# The shape of the read models as they were built: when it differs from this
# code's, they are dropped and rebuilt from the log (see ensure_schema).
schema_fingerprint = Table(
    "schema_fingerprint",
    metadata,
    Column("fingerprint", Text, primary_key=True),
)

# Bump when the rows built from the same events change (a projection rule),
# so that existing read models are rebuilt; a change of tables needs no bump.
PROJECTION_RULES_VERSION = 7


def ddl() -> list[str]:
    """The statements that create the schema and every table and index, each
    a no-op when it exists already."""
    dialect = postgresql.dialect()  # type: ignore[no-untyped-call]
    statements = [f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}"]
    for table in metadata.sorted_tables:
        statements.append(str(CreateTable(table, if_not_exists=True).compile(dialect=dialect)))
        for index in sorted(table.indexes, key=lambda i: i.name or ""):
            statements.append(str(CreateIndex(index, if_not_exists=True).compile(dialect=dialect)))
    return statements


def fingerprint() -> str:
    text = "\n".join([*ddl(), f"rules {PROJECTION_RULES_VERSION}"])
    return hashlib.sha256(text.encode()).hexdigest()


async def create_schema(connection: asyncpg.Connection) -> None:
    async with transaction(connection):
        await connection.execute("SELECT pg_advisory_xact_lock($1)", _SCHEMA_LOCK_KEY)
        await _create(connection)


async def ensure_schema(connection: asyncpg.Connection) -> bool:
    """Creates the read models; when they were built in another shape (an
    older version of this code), drops them first, so the projector replays
    the log from sequence 1 into the new shape. True when it dropped them."""
    async with transaction(connection):
        await connection.execute("SELECT pg_advisory_xact_lock($1)", _SCHEMA_LOCK_KEY)
        stored = await _stored_fingerprint(connection)
        outdated = stored is not None and stored != fingerprint()
        if outdated:
            await drop_schema(connection)
        await _create(connection)
    return outdated


async def _create(connection: asyncpg.Connection) -> None:
    for statement in ddl():
        await connection.execute(statement)
    await connection.execute(
        f"INSERT INTO {SCHEMA}.schema_fingerprint (fingerprint) VALUES ($1) ON CONFLICT DO NOTHING",
        fingerprint(),
    )


async def _stored_fingerprint(connection: asyncpg.Connection) -> str | None:
    """None when there are no read models yet; "" when they predate fingerprints."""
    if not await connection.fetchval("SELECT 1 FROM pg_namespace WHERE nspname = $1", SCHEMA):
        return None
    if await connection.fetchval("SELECT to_regclass($1)", f"{SCHEMA}.schema_fingerprint") is None:
        return ""
    return str(
        await connection.fetchval(f"SELECT fingerprint FROM {SCHEMA}.schema_fingerprint LIMIT 1") or ""
    )


async def drop_schema(connection: asyncpg.Connection) -> None:
    await connection.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")


@contextlib.asynccontextmanager
async def transaction(connection: asyncpg.Connection) -> AsyncIterator[None]:
    """`connection.transaction()`, raising ConnectionLostError (one of
    POSTGRES_DOWN) when the connection was lost under it. When PostgreSQL goes
    away mid-transaction, asyncpg's rollback on the way out finds the
    connection closed and raises InterfaceError in place of the error that
    said so (AdminShutdownError, ConnectionDoesNotExistError, ...); left as
    it is, that InterfaceError would pass for a bug and end the projector."""
    try:
        async with connection.transaction():
            yield
    except asyncpg.InterfaceError as error:
        if _lost(connection):
            raise ConnectionLostError(str(error)) from error
        raise


def _lost(connection: asyncpg.Connection) -> bool:
    """Whether the connection is gone; asyncpg detaches a lost pooled connection, and
    then even asking it raises."""
    try:
        return bool(connection.is_closed())
    except asyncpg.InterfaceError:
        return True
