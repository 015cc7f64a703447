"""Recorded logs project into the read models a user expects to see; the
queries read them back as the CLI shows them."""

import json

import asyncpg
from support.golden_log import golden_log

from services.common.eventlog import StoredEvent
from services.common.eventstore import EventStore
from services.gateway.features.parts import Queries
from services.gateway.projector import NAME, Projector, load_position
from services.gateway.schema import ensure_schema


async def test_recorded_log_projects_the_experiments_users_saw(
    event_store: EventStore, pool: asyncpg.Pool
) -> None:
    log = golden_log("three_experiments.jsonl")
    stored = [StoredEvent(sequence, envelope, caught_up=False) for sequence, envelope in enumerate(log, 1)]
    await Projector(event_store, pool).apply(stored)
    queries = Queries(pool)

    assert [(e.id, e.name, e.state) for e in await queries.experiments.experiments()] == [
        (1, "mnist-const", "COMPLETED"),
        (2, "failing", "ERROR"),
        (3, "killed", "CANCELED"),
    ]
    completed, failed, killed = [(await queries.trials.trials(i))[0] for i in (1, 2, 3)]
    assert (completed.state, completed.total_batches, completed.progress) == ("COMPLETED", 100, 1.0)
    assert json.loads(completed.latest_validation.metrics_json) == {"validation_loss": 0.01}
    assert completed.latest_checkpoint.steps_completed == 100
    assert (failed.state, failed.restarts) == ("ERROR", 1)
    assert killed.state == "CANCELED"


async def test_recent_metrics_are_the_newest_of_each_group(
    event_store: EventStore, pool: asyncpg.Pool
) -> None:
    rows = [
        (7, group, step, 2, json.dumps({"loss": step}), step, False)
        for group in ("b", "a")
        for step in range(1, 151)
    ]
    rows.append((8, "a", 1, 1, "{}", 1, False))  # another trial's point is never shown
    rows += [(7, "a", step, 1, "{}", step, True) for step in range(140, 161)]  # nor a superseded one
    await pool.executemany(
        'INSERT INTO read_model.metrics (trial_id, "group", steps_completed, trial_run_id, metrics, reported_at_ns,'
        " superseded) VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7)",
        rows,
    )
    points = await Queries(pool).trials.recent_metrics(7)
    expected = [(group, step) for group in ("a", "b") for step in range(51, 151)]
    assert [(p.group, p.steps_completed) for p in points] == expected
    assert await Queries(pool).trials.recent_metrics(9) == []


async def test_read_models_of_another_shape_are_rebuilt(event_store: EventStore, pool: asyncpg.Pool) -> None:
    log = golden_log("three_experiments.jsonl")
    await Projector(event_store, pool).apply(
        [StoredEvent(n, e, caught_up=False) for n, e in enumerate(log, 1)]
    )
    async with pool.acquire() as connection:
        assert not await ensure_schema(connection)  # same shape: kept
        await connection.execute("UPDATE read_model.schema_fingerprint SET fingerprint = 'older code'")
        assert await ensure_schema(connection)  # another shape: dropped, empty, at position 0
        assert await connection.fetchval("SELECT count(*) FROM read_model.experiments") == 0
    assert await load_position(pool, NAME) == 0
