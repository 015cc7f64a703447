"""`python -m services.gateway.rebuild --verify` (verify.py): on a recorded
log projected live, it passes and leaves the read models as they were; a
corrupted, a deleted and an invented row are each reported (table, key,
column: live vs rebuilt) with exit status 1; only what the live projector
had applied is compared."""

import os
import subprocess
import sys

import asyncpg
import pytest
from sqlalchemy import BigInteger, Column, MetaData, Table, Text
from support.golden_log import golden_log
from test_rebuild import dump
from test_replay import stored_as_recorded

from services.common.eventstore import EventStore
from services.gateway.projector import Projector
from services.gateway.read_models import SCHEMA
from services.gateway.rebuild import RebuildError, rebuild
from services.gateway.settings import GatewaySettings
from services.gateway.verify import (
    LOCK_KEY,
    Difference,
    Verification,
    VerifyError,
    compared_tables,
    comparison,
    report,
    verify,
)

LOG = "adaptive_pause_kill.jsonl"
DEADLINE_S = 120


@pytest.fixture
def settings(database_url: str, nats_url: str, namespace: str) -> GatewaySettings:
    return GatewaySettings(database_url=database_url, nats_url=nats_url, namespace=namespace)


@pytest.fixture
async def projected(event_store: EventStore, pool: asyncpg.Pool) -> int:
    """The recorded log appended as it was and projected live; its last sequence."""
    log = golden_log(LOG)
    await stored_as_recorded(event_store, log)
    await Projector(event_store, pool).run(follow=False)
    return len(log)


def verify_command(settings: GatewaySettings, *arguments: str) -> subprocess.CompletedProcess[str]:
    environment = dict(
        os.environ,
        DET_DATABASE_URL=settings.database_url,
        DET_NATS_URL=settings.nats_url,
        DET_NAMESPACE=settings.namespace,
    )
    return subprocess.run(
        [sys.executable, "-m", "services.gateway.rebuild", "--verify", *arguments],
        env=environment,
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )


async def checked(settings: GatewaySettings, pool: asyncpg.Pool, max_differences: int = 20) -> Verification:
    async with pool.acquire() as connection:
        return await verify(settings, connection, max_differences)


async def shadow_schemas(pool: asyncpg.Pool) -> list[str]:
    records = await pool.fetch("SELECT nspname FROM pg_namespace WHERE nspname LIKE $1", f"{SCHEMA}_%")
    return [record[0] for record in records]


async def test_a_healthy_cluster_passes_and_is_left_as_it_was(
    settings: GatewaySettings, pool: asyncpg.Pool, projected: int
) -> None:
    before = await dump(pool)
    rows = sum(len(before[table.name]) for table in compared_tables())

    finished = verify_command(settings)

    assert (finished.returncode, finished.stdout) == (
        0,
        f"{len(compared_tables())} tables, {rows} rows, no difference (the log up to sequence {projected})\n",
    ), finished.stderr
    assert await dump(pool) == before
    assert await shadow_schemas(pool) == []


async def test_a_corrupted_a_deleted_and_an_invented_row_are_reported(
    settings: GatewaySettings, pool: asyncpg.Pool, projected: int
) -> None:
    state, description = await pool.fetchrow(
        f"SELECT state, description FROM {SCHEMA}.experiments WHERE id = 1"
    )
    await pool.execute(
        f"UPDATE {SCHEMA}.experiments SET state = 'PAUSED', description = 'tampered' WHERE id = 1"
    )
    deleted = await pool.fetchval(
        f"DELETE FROM {SCHEMA}.trials WHERE id = (SELECT min(id) FROM {SCHEMA}.trials) RETURNING id"
    )
    await pool.execute(
        f"INSERT INTO {SCHEMA}.users (user_id, username, display_name, admin, active, created_at_ns, created_by,"
        " password_changed_at_ns) VALUES (999, 'mallory', '', true, true, 0, 'mallory', 0)"
    )

    finished = verify_command(settings)

    assert finished.returncode == 1, finished.stderr
    lines = finished.stdout.splitlines()
    changed = (
        f'state: live "PAUSED", rebuilt "{state}"; description: live "tampered", rebuilt "{description}"'
    )
    assert f"experiments id=1: {changed}" in lines
    assert f"trials id={deleted}: missing from the live read models (the log gives it)" in lines
    assert "users user_id=999: only in the live read models (the log does not give it)" in lines
    assert lines[-1].startswith(f"3 rows differ in 3 of {len(compared_tables())} tables (")
    assert await shadow_schemas(pool) == []


async def test_differences_past_the_limit_are_counted(
    settings: GatewaySettings, pool: asyncpg.Pool, projected: int
) -> None:
    await pool.execute(f"UPDATE {SCHEMA}.trials SET total_batches = total_batches + 1")
    trials = await pool.fetchval(f"SELECT count(*) FROM {SCHEMA}.trials")

    verification = await checked(settings, pool, max_differences=2)

    [check] = [check for check in verification.tables if check.differing]
    assert (check.table, check.differing, len(check.shown)) == ("trials", trials, 2)
    first = check.shown[0]
    assert first == Difference("trials", first.key, "changed", (("total_batches", *first.columns[0][1:]),))
    assert first.columns[0][1] == first.columns[0][2] + 1
    assert f"trials: {trials - 2} more rows differ" in report(verification)


async def test_a_table_of_keys_only_is_compared_by_its_keys(pool: asyncpg.Pool) -> None:
    keys = Table(
        "pairs", MetaData(), Column("a", BigInteger, primary_key=True), Column("b", Text, primary_key=True)
    )
    for schema, rows in (("live", [(1, "x"), (2, "y")]), ("rebuilt", [(2, "y"), (3, "z")])):
        await pool.execute(f"CREATE SCHEMA {schema}; CREATE TABLE {schema}.pairs (a bigint, b text)")
        await pool.executemany(f"INSERT INTO {schema}.pairs VALUES ($1, $2)", rows)

    records = await pool.fetch(comparison(keys, "live", "rebuilt"), 10)

    assert [(r["differing"], r["live"], r["rebuilt"], r["columns"]) for r in records] == [
        (2, '{"a": 1, "b": "x"}', None, []),
        (2, None, '{"a": 3, "b": "z"}', []),
    ]


async def test_only_what_the_live_projector_applied_is_compared(
    event_store: EventStore, settings: GatewaySettings, pool: asyncpg.Pool
) -> None:
    """A projector behind the log is no difference: the rebuild stops where it is."""
    log = golden_log(LOG)
    await stored_as_recorded(event_store, log)
    await Projector(event_store, pool).run(follow=False, until=len(log) // 2)

    verification = await checked(settings, pool)

    assert (verification.sequence, verification.healthy) == (len(log) // 2, True)


async def test_a_rebuild_past_the_end_of_the_log_is_refused_before_anything_is_dropped(
    event_store: EventStore, pool: asyncpg.Pool, projected: int
) -> None:
    before = await dump(pool)
    with pytest.raises(RebuildError, match=f"sequence {projected + 1} is past the end of the log"):
        await rebuild(event_store, pool, until=projected + 1)
    assert await dump(pool) == before


async def test_it_refuses_read_models_of_another_version(
    settings: GatewaySettings, pool: asyncpg.Pool, projected: int
) -> None:
    await pool.execute(f"UPDATE {SCHEMA}.schema_fingerprint SET fingerprint = 'older'")
    with pytest.raises(VerifyError, match="another version"):
        await checked(settings, pool)
    assert await shadow_schemas(pool) == []


async def test_one_check_at_a_time(settings: GatewaySettings, pool: asyncpg.Pool, projected: int) -> None:
    async with pool.acquire() as other:
        await other.execute("SELECT pg_advisory_lock($1)", LOCK_KEY)
        with pytest.raises(VerifyError, match="another check"):
            await checked(settings, pool)
