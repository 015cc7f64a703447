"""The read models' shape: every feature's tables (features/), the
projector's position and the fingerprint of the shape they were built in.
A gateway that finds read models of another shape (older code) drops them
and replays the log into the new shape (`ensure_schema`).
"""

import hashlib

import asyncpg
from sqlalchemy import BigInteger, Column, Table, Text
from sqlalchemy.dialects import postgresql
from sqlalchemy.schema import CreateIndex, CreateTable

from services.gateway.features import FEATURES
from services.gateway.read_models import SCHEMA, metadata, transaction

# Serialises schema creation between gateways starting at the same time.
_SCHEMA_LOCK_KEY = 0x6465745F726D  # "det_rm"


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
    for table in sorted(tables(), key=lambda t: t.name):
        statements.append(str(CreateTable(table, if_not_exists=True).compile(dialect=dialect)))
        for index in sorted(table.indexes, key=lambda i: i.name or ""):
            statements.append(str(CreateIndex(index, if_not_exists=True).compile(dialect=dialect)))
    return statements


def tables() -> list[Table]:
    """Every table of the read models: the features' and the projector's own."""
    owned = [table for feature in FEATURES for table in (*feature.row_tables, *feature.other_tables)]
    return [*owned, projection_position, schema_fingerprint]


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
