"""`python -m services.gateway.rebuild --verify`: do the live read models
hold exactly the rows the event log gives? Every table is compared row by
row, by its primary key, with the read models rebuilt from the log, and every
row that differs is reported: a column whose values differ (live vs
rebuilt), a row the live ones miss, or one they have that the log does not give.

The check holds still while the live projector moves on: in one snapshot
(a REPEATABLE READ transaction) it reads the live projector's position P and
copies every table into LIVE_COPY (the live rows as they were at P). A
process of its own (`python -m services.gateway.rebuild --until P`, with
DET_READ_MODEL_SCHEMA naming REBUILT: read_models.py) replays the log from
sequence 1 to P into REBUILT, as a rebuild does; PostgreSQL then compares
the two, table by table (a full join on the primary key). So events appended
meanwhile are never differences, and the live read models are only read.
Both schemas are dropped at the end (and at the start: a check killed
half-way leaves them); while it runs the read models take three times their
room. One check at a time (an advisory lock).
"""

import asyncio
import json
import os
import sys
from dataclasses import dataclass
from typing import Any, Literal

import asyncpg
from sqlalchemy import Table

from services.gateway.projector import NAME
from services.gateway.read_models import SCHEMA
from services.gateway.schema import fingerprint, schema_fingerprint, tables
from services.gateway.settings import GatewaySettings

LIVE_COPY = f"{SCHEMA}_verify_live"
REBUILT = f"{SCHEMA}_verify_rebuilt"
# The differences of a table shown (the others are counted).
MAX_DIFFERENCES = 20
# A value shown longer than this is cut.
SHOWN_CHARS = 120
LOCK_KEY = 0x6465745F766679  # "det_vfy"

Kind = Literal["changed", "missing", "extra"]


class VerifyError(Exception):
    """The check could not be made (the message says why)."""


@dataclass(frozen=True)
class Difference:
    """A row that differs: changed (`columns`: name, live value, rebuilt
    value), missing from the live read models, or extra in them."""

    table: str
    key: dict[str, Any]
    kind: Kind
    columns: tuple[tuple[str, Any, Any], ...] = ()


@dataclass(frozen=True)
class TableCheck:
    table: str
    # The live rows compared, and how many of them (or of the rebuilt ones) differ.
    rows: int
    differing: int
    shown: tuple[Difference, ...]


@dataclass(frozen=True)
class Verification:
    # The live projector's position: the log was rebuilt up to it.
    sequence: int
    tables: tuple[TableCheck, ...]

    @property
    def healthy(self) -> bool:
        return not any(check.differing for check in self.tables)


def compared_tables() -> list[Table]:
    """Every table of the read models (the features' own and the projector's
    position), but the fingerprint of their shape: it names the schema, so
    the rebuilt one differs by construction (it is checked before)."""
    return [table for table in tables() if table is not schema_fingerprint]


async def verify(
    settings: GatewaySettings, connection: asyncpg.Connection, max_differences: int = MAX_DIFFERENCES
) -> Verification:
    """Checks the live read models (see the module's docstring); VerifyError
    when it cannot (another check running, no read models, other code's)."""
    if not await connection.fetchval("SELECT pg_try_advisory_lock($1)", LOCK_KEY):
        raise VerifyError("another check of the read models is running on this database")
    try:
        await _drop_copies(connection)
        sequence = await _copy_live(connection)
        await _rebuild_up_to(settings, sequence)
        checks = [await _compare(connection, table, max_differences) for table in compared_tables()]
        return Verification(sequence, tuple(checks))
    finally:
        await _drop_copies(connection)
        await connection.execute("SELECT pg_advisory_unlock($1)", LOCK_KEY)


async def _drop_copies(connection: asyncpg.Connection) -> None:
    for schema in (LIVE_COPY, REBUILT):
        await connection.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


async def _copy_live(connection: asyncpg.Connection) -> int:
    """Copies the live tables into LIVE_COPY, in one snapshot with the live
    projector's position, which it returns."""
    try:
        async with connection.transaction(isolation="repeatable_read"):
            sequence = await connection.fetchval(
                f"SELECT sequence FROM {SCHEMA}.projection_position WHERE name = $1", NAME
            )
            await _check_shape(connection)
            await connection.execute(f"CREATE SCHEMA {LIVE_COPY}")
            for table in compared_tables():
                await connection.execute(
                    f'CREATE TABLE {LIVE_COPY}."{table.name}" AS TABLE {SCHEMA}."{table.name}"'
                )
    except asyncpg.UndefinedTableError as error:
        raise VerifyError(f"no read models to check in schema {SCHEMA}: {error}") from error
    return int(sequence or 0)


async def _check_shape(connection: asyncpg.Connection) -> None:
    """The live read models must be of this code's shape and rules: a gateway
    of another version builds other rows from the same events."""
    stored = {
        record[0] for record in await connection.fetch(f"SELECT fingerprint FROM {SCHEMA}.schema_fingerprint")
    }
    if stored != {fingerprint()}:
        raise VerifyError(
            "the live read models were built by another version of the gateway (their shape's"
            " fingerprint differs from this code's): check with the version the gateway runs"
        )


async def _rebuild_up_to(settings: GatewaySettings, sequence: int) -> None:
    """Replays the log up to `sequence` into REBUILT, in a process of its own
    (its schema is named when its modules are loaded)."""
    environment = dict(
        os.environ,
        DET_READ_MODEL_SCHEMA=REBUILT,
        DET_DATABASE_URL=settings.database_url,
        DET_NATS_URL=settings.nats_url,
        DET_NAMESPACE=settings.namespace,
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.gateway.rebuild",
        "--until",
        str(sequence),
        env=environment,
        stdin=asyncio.subprocess.DEVNULL,
    )
    if (code := await process.wait()) != 0:
        raise VerifyError(
            f"rebuilding the read models from the log failed (exit status {code}; its log above)"
        )


def comparison(table: Table, live: str = LIVE_COPY, rebuilt: str = REBUILT) -> str:
    """The statement that lists the rows of `table` that differ between the
    schemas `live` and `rebuilt` (at most $1 of them, by key), each with the
    count of them all: (differing, live row, rebuilt row, differing columns)
    as JSON objects, NULL for a missing row."""
    keys = [str(column.name) for column in table.primary_key.columns]
    others = [str(column.name) for column in table.columns if column.name not in keys]
    joined = " AND ".join(f'l."{key}" = r."{key}"' for key in keys)
    ordered = ", ".join(f'coalesce(l."{key}", r."{key}") AS key_{n}' for n, key in enumerate(keys))
    named = ", ".join(
        f"""CASE WHEN l."{name}" IS DISTINCT FROM r."{name}" THEN '{name}' END""" for name in others
    )
    return (
        "SELECT count(*) OVER () AS differing, live, rebuilt, columns FROM ("
        f" SELECT to_jsonb(l) AS live, to_jsonb(r) AS rebuilt, array_remove(ARRAY[{named}]::text[], NULL) AS columns,"
        f" {ordered}"
        f' FROM {live}."{table.name}" AS l FULL JOIN {rebuilt}."{table.name}" AS r ON {joined}'
        ") AS compared WHERE live IS NULL OR rebuilt IS NULL OR cardinality(columns) > 0"
        f" ORDER BY {', '.join(f'key_{n}' for n in range(len(keys)))} LIMIT $1"
    )


async def _compare(connection: asyncpg.Connection, table: Table, max_differences: int) -> TableCheck:
    rows = await connection.fetchval(f'SELECT count(*) FROM {LIVE_COPY}."{table.name}"')
    records = await connection.fetch(comparison(table), max_differences)
    keys = [str(column.name) for column in table.primary_key.columns]
    shown = tuple(
        difference(table.name, keys, _loaded(r["live"]), _loaded(r["rebuilt"]), r["columns"]) for r in records
    )
    return TableCheck(table.name, int(rows), int(records[0]["differing"]) if records else 0, shown)


def _loaded(row: str | None) -> dict[str, Any] | None:
    return None if row is None else dict(json.loads(row))


def difference(
    table: str,
    keys: list[str],
    live: dict[str, Any] | None,
    rebuilt: dict[str, Any] | None,
    columns: list[str],
) -> Difference:
    """One differing row, from its live and rebuilt rows (None: there is none)."""
    if live is None:
        assert rebuilt is not None
        return Difference(table, {key: rebuilt[key] for key in keys}, "missing")
    if rebuilt is None:
        return Difference(table, {key: live[key] for key in keys}, "extra")
    changed = tuple((name, live[name], rebuilt[name]) for name in columns)
    return Difference(table, {key: live[key] for key in keys}, "changed", changed)


def report(verification: Verification) -> list[str]:
    """What the operator reads: each difference shown, each table's count of
    those left out, and a last line that sums it up."""
    checks = verification.tables
    rows = sum(check.rows for check in checks)
    at = f"the log up to sequence {verification.sequence}"
    if verification.healthy:
        return [f"{len(checks)} tables, {rows} rows, no difference ({at})"]
    lines = []
    for check in checks:
        lines += [_described(shown) for shown in check.shown]
        if check.differing > len(check.shown):
            lines.append(f"{check.table}: {_rows_differ(check.differing - len(check.shown), 'more ')}")
    differing = [check for check in checks if check.differing]
    total = sum(check.differing for check in differing)
    lines.append(
        f"{_rows_differ(total)} in {len(differing)} of {len(checks)} tables ({rows} live rows;"
        f" {at}): live read models vs rebuilt from the log"
    )
    return lines


def _rows_differ(count: int, more: str = "") -> str:
    return f"{count} {more}row differs" if count == 1 else f"{count} {more}rows differ"


def _described(difference: Difference) -> str:
    key = ", ".join(f"{name}={_shown(value)}" for name, value in difference.key.items())
    where = f"{difference.table} {key}"
    if difference.kind == "missing":
        return f"{where}: missing from the live read models (the log gives it)"
    if difference.kind == "extra":
        return f"{where}: only in the live read models (the log does not give it)"
    changes = "; ".join(f"{name}: live {_shown(a)}, rebuilt {_shown(b)}" for name, a, b in difference.columns)
    return f"{where}: {changes}"


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"
