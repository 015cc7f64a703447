"""Rebuilding the read models from the log gives identical rows: after a
drop and a replay from sequence 1, after replaying twice, and from a log in
which every message is delivered twice."""

import contextlib
import json
from collections.abc import AsyncGenerator
from typing import cast

import asyncpg
import pytest
from google.protobuf.message import Message

from determined.proto import events_pb2 as ev
from services.common.envelope import Append
from services.common.eventstore import EventStore, StoredEvent
from services.gateway.projector import Projector
from services.gateway.queries import Queries
from services.gateway.rebuild import rebuild
from services.gateway.tables import SCHEMA, create_schema, drop_schema, metadata

CONFIG = json.dumps({"name": "e", "searcher": {"name": "single", "metric": "loss"}, "labels": ["x"]})


def history() -> list[tuple[str, Message]]:
    """Two experiments as the gateway and the other services record them:
    a failed and restarted allocation, metrics, checkpoints and a kill."""
    metrics = [ev.MetricReport(group="training", steps_completed=s, metrics_json=f'{{"loss": {1 / s}}}')
               for s in (10, 20)]
    validation = [ev.MetricReport(group="validation", steps_completed=20, metrics_json='{"loss": 0.3}')]
    return [
        ("experiment/1", ev.ExperimentCreated(experiment_id=1, name="e", owner="u", config_json=CONFIG,
                                              activate=True)),
        ("experiment/2", ev.ExperimentCreated(experiment_id=2, name="f", owner="u", config_json=CONFIG)),
        ("agent/a1", ev.AgentRegistered(agent_id="a1", hostname="h", slots=[ev.Slot(slot_id=0, type="cpu")])),
        ("trial/1", ev.TrialCreated(trial_id=1, experiment_id=1, hparams_json='{"lr": 1}', trial_seed=3)),
        ("trial/2", ev.TrialCreated(trial_id=2, experiment_id=1, hparams_json='{"lr": 2}')),
        ("trial/3", ev.TrialCreated(trial_id=3, experiment_id=2)),
        ("allocation/1.1", ev.AllocationAssigned(allocation_id="1.1", trial_id=1, agent_id="a1", trial_run_id=1,
                                                 slot_ids=[0])),
        ("allocation/1.1", ev.AllocationStarted(allocation_id="1.1", trial_id=1)),
        ("metrics/1", ev.TrialMetricsReported(trial_id=1, experiment_id=1, trial_run_id=1, reports=metrics)),
        ("checkpoint/c1", ev.CheckpointReported(uuid="c1", trial_id=1, experiment_id=1, steps_completed=10,
                                                resources={"a": 1, "b": 2}, reported_at_ns=5)),
        ("allocation/1.1", ev.AllocationExited(allocation_id="1.1", trial_id=1, exit_code=1)),
        ("allocation/1.2", ev.AllocationAssigned(allocation_id="1.2", trial_id=1, trial_run_id=2)),
        ("allocation/1.2", ev.AllocationStarted(allocation_id="1.2", trial_id=1)),
        ("metrics/1", ev.TrialMetricsReported(trial_id=1, experiment_id=1, trial_run_id=2,
                                              reports=metrics + validation)),
        ("trial/1", ev.TrialProgressReported(trial_id=1, experiment_id=1, progress=0.5)),
        ("checkpoint/c2", ev.CheckpointReported(uuid="c2", trial_id=1, experiment_id=1, steps_completed=20)),
        ("allocation/1.2", ev.AllocationExited(allocation_id="1.2", trial_id=1)),
        ("trial/1", ev.TrialEnded(trial_id=1, experiment_id=1, state=ev.TRIAL_STATE_COMPLETED)),
        ("allocation/2.1", ev.AllocationAssigned(allocation_id="2.1", trial_id=2, trial_run_id=1)),
        ("allocation/2.1", ev.AllocationStarted(allocation_id="2.1", trial_id=2)),
        ("experiment/1", ev.ExperimentKillRequested(experiment_id=1)),
        ("allocation/2.1", ev.AllocationExited(allocation_id="2.1", trial_id=2, exit_code=137, killed=True)),
        ("trial/2", ev.TrialEnded(trial_id=2, experiment_id=1, state=ev.TRIAL_STATE_CANCELED, reason="killed")),
        ("experiment/1", ev.ExperimentStateChanged(experiment_id=1, state=ev.EXPERIMENT_STATE_CANCELED)),
        ("trial/3", ev.TrialProgressReported(trial_id=3, experiment_id=2, progress=0.25)),
        ("experiment/2", ev.ExperimentStateChanged(experiment_id=2, state=ev.EXPERIMENT_STATE_COMPLETED)),
    ]


@pytest.fixture
async def projected(event_store: EventStore, pool: asyncpg.Pool) -> list[StoredEvent]:
    """The history appended to the log and projected; the stored events."""
    for index, (aggregate_name, payload) in enumerate(history()):
        await event_store.append(Append(aggregate_name, payload, f"h-{index}"), actor="service:test")
    await Projector(event_store, pool).run(follow=False)
    return await _read_all(event_store)


async def dump(pool: asyncpg.Pool, *, with_position: bool = True) -> dict[str, list[tuple[object, ...]]]:
    tables = [t for t in metadata.sorted_tables if with_position or t.name != "projection_position"]
    rows = {}
    for table in tables:
        order = ", ".join(f'"{column.name}"' for column in table.columns)
        records = await pool.fetch(f"SELECT * FROM {SCHEMA}.{table.name} ORDER BY {order}")
        rows[table.name] = [tuple(record) for record in records]
    return rows


async def test_rebuild_gives_identical_rows(
    event_store: EventStore, pool: asyncpg.Pool, projected: list[StoredEvent]
) -> None:
    before = await dump(pool)
    assert await rebuild(event_store, pool) == len(history())
    assert await dump(pool) == before
    assert before["projection_position"] == [("read_model", len(history()))]


async def test_replaying_twice_gives_identical_rows(
    event_store: EventStore, pool: asyncpg.Pool, projected: list[StoredEvent]
) -> None:
    before = await dump(pool)
    await pool.execute(f"UPDATE {SCHEMA}.projection_position SET sequence = 0")
    await Projector(event_store, pool).run(follow=False)
    assert await dump(pool) == before


async def test_duplicated_messages_give_identical_rows(
    event_store: EventStore, pool: asyncpg.Pool, projected: list[StoredEvent]
) -> None:
    before = await dump(pool, with_position=False)
    async with pool.acquire() as connection:
        await drop_schema(connection)
        await create_schema(connection)
    projector = Projector(event_store, pool)
    doubled = [StoredEvent(2 * e.sequence - copy, e.envelope, False) for e in projected for copy in (1, 0)]
    for start in range(0, len(doubled), 7):
        await projector.apply(doubled[start:start + 7])
    assert await dump(pool, with_position=False) == before


async def test_projected_history_reads_right(pool: asyncpg.Pool, projected: list[StoredEvent]) -> None:
    experiments = await pool.fetch(f"SELECT id, state, ended_at_ns FROM {SCHEMA}.experiments ORDER BY id")
    assert [(r["id"], r["state"]) for r in experiments] == [(1, "CANCELED"), (2, "COMPLETED")]
    by_sequence = {e.sequence: e.envelope.occurred_at_ns for e in projected}
    assert experiments[0]["ended_at_ns"] == by_sequence[24]
    trial = await pool.fetchrow(f"SELECT * FROM {SCHEMA}.trials WHERE id = 1")
    assert (trial["state"], trial["total_batches"], trial["current_allocation_id"]) == ("COMPLETED", 20, "1.2")
    assert await pool.fetchval(f"SELECT count(*) FROM {SCHEMA}.metrics") == 5
    queries = Queries(pool)
    trials = await queries.trials(1)
    assert [(t.state, t.restarts) for t in trials] == [("COMPLETED", 1), ("CANCELED", 0)]
    assert trials[0].latest_validation.metrics_json == '{"loss": 0.3}'
    # Experiment 1: its COMPLETED trial counts as done (1.0), its CANCELED one at 0.
    assert [e.progress for e in await queries.experiments()] == [0.5, 1.0]


async def _read_all(store: EventStore) -> list[StoredEvent]:
    last = await store.last_sequence()
    events = []
    async with contextlib.aclosing(cast(AsyncGenerator[StoredEvent, None], store.read(None))) as stream:
        async for stored in stream:
            events.append(stored)
            if stored.sequence >= last:
                break
    return events
