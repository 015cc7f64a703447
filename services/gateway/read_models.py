"""The read models' common ground: the PostgreSQL schema they all live in
(one, so that a rebuild is `DROP SCHEMA read_model CASCADE` and a replay from
sequence 1), the SQLAlchemy metadata each feature defines its tables on
(features/<name>/tables.py), what PostgreSQL being down looks like, and the
pool as queries use it.

The statements are compiled from the metadata to SQL text and run through
asyncpg (the projector's hot paths need asyncpg's executemany; see
INFRA-NOTES). Times are the events' `occurred_at_ns` (or the reported time a
trial put in the event), never the clock of the projector, so a rebuild gives
identical rows.
"""

import contextlib
import os
import re
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
from sqlalchemy import MetaData

from services.gateway.errors import READ_MODELS_UNAVAILABLE, ReadModelsUnavailableError


def _schema_name() -> str:
    """read_model, or DET_READ_MODEL_SCHEMA: `rebuild --verify` rebuilds the read
    models beside the live ones, in a process of its own that names another schema."""
    name = os.environ.get("DET_READ_MODEL_SCHEMA", "read_model")
    if not re.fullmatch(r"[a-z_][a-z0-9_]{0,39}", name):
        raise ValueError(
            f"DET_READ_MODEL_SCHEMA must be a lower-case SQL name (a-z, 0-9, _; at most 40), got {name!r}"
        )
    return name


SCHEMA = _schema_name()


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

metadata = MetaData(schema=SCHEMA)


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


class ReadModels:
    """The pool as the queries use it: while PostgreSQL is down (refused,
    gone, shutting down) a query answers ReadModelsUnavailableError at once,
    which the API turns into UNAVAILABLE for the caller to retry."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        with _unavailable_while_down():
            return list(await self._pool.fetch(sql, *args))

    async def fetchrow(self, sql: str, *args: Any) -> asyncpg.Record | None:
        with _unavailable_while_down():
            return await self._pool.fetchrow(sql, *args)

    async def fetchval(self, sql: str, *args: Any) -> Any:
        with _unavailable_while_down():
            return await self._pool.fetchval(sql, *args)

    async def fetch_hashed(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        """`fetch`, with PostgreSQL told to group by hashing, not sorting: a
        million rows into a few thousand groups would otherwise be sorted
        (spilling to disk) whenever the statistics underestimate them."""
        with _unavailable_while_down():
            async with self._pool.acquire() as connection, transaction(connection):
                await connection.execute("SET LOCAL enable_sort = off")
                return list(await connection.fetch(sql, *args))


@contextlib.contextmanager
def _unavailable_while_down() -> Iterator[None]:
    try:
        yield
    except (*POSTGRES_DOWN, asyncpg.exceptions.UndefinedTableError) as error:
        # No table yet: PostgreSQL came up a moment ago, the projector creates them.
        raise ReadModelsUnavailableError(READ_MODELS_UNAVAILABLE) from error
