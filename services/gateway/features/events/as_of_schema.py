"""Read models folded from a part of the log, beside the live ones and never
touching them: the scratch of an answer "as it was" (as_of.py).

The scratch is PostgreSQL's own per-session temporary schema (`pg_temp`) on
a connection of its own: every read-model table is made there (empty,
unlogged as temporary tables are), the events are folded into it by the
projector's own code (`Projector.apply`: the same plan, rules, statements
and skipping of an event it cannot apply), and the features' own queries
read it. Their statements name the live schema (read_models.SCHEMA), so the
connection given to them rewrites that name to `pg_temp` in each statement
(`in_scratch`). Temporary tables are the session's alone and go with it: a
request cancelled or failed half-way, or a gateway killed, leaves nothing
behind; closing the connection drops them.
"""

import contextlib
import functools
import re
from collections.abc import AsyncIterator
from typing import Any, cast

import asyncpg

from services.common.eventlog import EventLog, StoredEvent
from services.gateway.features.parts import Queries
from services.gateway.projector import Projector
from services.gateway.read_models import SCHEMA
from services.gateway.schema import ddl

SCRATCH = "pg_temp"
# The projector's position in the scratch (its own table, like the live one's).
POSITION_NAME = "as_of"
# A table named in a statement: the live schema's name, then a dot.
_QUALIFIED = re.compile(rf"(?<![\w$]){re.escape(SCHEMA)}\.")


def in_scratch(sql: str) -> str:
    """`sql` with the tables of the live read models named in the scratch."""
    return _QUALIFIED.sub(f"{SCRATCH}.", sql)


@functools.cache
def scratch_ddl() -> str:
    """One script that makes every read-model table and index in the scratch."""
    return ";\n".join(
        in_scratch(statement) for statement in ddl() if not statement.startswith("CREATE SCHEMA")
    )


class ScratchConnection:
    """A connection as the projector and the queries use a pool (fetch,
    execute, acquire, transaction), its statements rewritten to the scratch."""

    def __init__(self, connection: asyncpg.Connection) -> None:
        self._connection = connection

    async def fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        return list(await self._connection.fetch(in_scratch(sql), *args))

    async def fetchrow(self, sql: str, *args: Any) -> asyncpg.Record | None:
        return await self._connection.fetchrow(in_scratch(sql), *args)

    async def fetchval(self, sql: str, *args: Any) -> Any:
        return await self._connection.fetchval(in_scratch(sql), *args)

    async def execute(self, sql: str, *args: Any) -> str:
        return str(await self._connection.execute(in_scratch(sql), *args))

    async def executemany(self, sql: str, args: Any) -> None:
        await self._connection.executemany(in_scratch(sql), args)

    def transaction(self) -> Any:
        return self._connection.transaction()

    def is_closed(self) -> bool:
        return bool(self._connection.is_closed())

    @contextlib.asynccontextmanager
    async def acquire(self) -> AsyncIterator["ScratchConnection"]:
        yield self

    def as_pool(self) -> asyncpg.Pool:
        """This connection where a pool is asked for (it has what they use of one)."""
        return cast(asyncpg.Pool, self)


async def scratch(connection: asyncpg.Connection) -> ScratchConnection:
    """Empty scratch read models on `connection` (a connection of its own,
    which drops them when it closes)."""
    await connection.execute(scratch_ddl())
    return ScratchConnection(connection)


async def fold(
    log: EventLog,
    scratch: ScratchConnection,
    batches: AsyncIterator[list[StoredEvent]],
    position: str = POSITION_NAME,
) -> None:
    """Applies `batches` to the scratch as the live projector applies the log.
    A second fold into the same scratch names a `position` of its own: the
    projector skips the events at or below its position."""
    projector = Projector(log, scratch.as_pool(), name=position, index_types=False)
    async for batch in batches:
        if batch:
            await projector.apply(batch)


def scratch_queries(scratch: ScratchConnection) -> Queries:
    """The features' queries, reading the scratch."""
    return Queries(scratch.as_pool())
