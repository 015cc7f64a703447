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
from services.common.eventlog import StoredEvent
from services.common.eventstore import EventStore
from services.gateway.features.events import type_index
from services.gateway.features.parts import Queries
from services.gateway.projector import Projector
from services.gateway.rebuild import rebuild
from services.gateway.schema import SCHEMA, create_schema, drop_schema, metadata

CONFIG = json.dumps({"name": "e", "searcher": {"name": "single", "metric": "loss"}, "labels": ["x"]})


def metrics(run_id: int, *steps: int) -> ev.TrialMetricsReported:
    reports = [
        ev.MetricReport(group="training", steps_completed=s, metrics_json=f'{{"loss": {1 / s}}}')
        for s in steps
    ]
    return ev.TrialMetricsReported(trial_id=1, experiment_id=1, trial_run_id=run_id, reports=reports)


def requested(trial_id: int, run_id: int, resumed_at: int = 0) -> ev.AllocationRequested:
    launch = ev.TrialLaunch(trial_id=trial_id, trial_run_id=run_id, steps_completed=resumed_at)
    return ev.AllocationRequested(allocation_id=f"{trial_id}.{run_id}", task_id=str(trial_id), trial=launch)


def assigned(allocation_id: str) -> ev.AllocationAssigned:
    placements = [ev.Placement(agent_id="a1", slot_ids=[0])]
    return ev.AllocationAssigned(
        allocation_id=allocation_id, task_id=allocation_id.split(".")[0], placements=placements
    )


def history() -> list[tuple[str, Message]]:
    """Two experiments as the gateway and the other services record them: a
    failed run resumed from its checkpoint (its later points superseded), a
    searcher stop acknowledged, a run lost with its agent, a kill, a request
    canceled before it ran, and one assignment in the shape of older logs."""
    validation = ev.TrialValidationReported(
        trial_id=1,
        experiment_id=1,
        trial_run_id=2,
        steps_completed=30,
        metrics_json='{"loss": 0.3}',
        reported_at_ns=7,
    )
    old_assignment = ev.AllocationAssigned(
        allocation_id="2.1",
        trial_id=2,
        experiment_id=1,
        agent_id="a1",
        slot_ids=[0],
        trial_run_id=1,
        config_json=CONFIG,
    )
    return [
        (
            "experiment/1",
            ev.ExperimentCreated(experiment_id=1, name="e", owner="u", config_json=CONFIG, activate=True),
        ),
        ("experiment/2", ev.ExperimentCreated(experiment_id=2, name="f", owner="u", config_json=CONFIG)),
        ("agent/a1", ev.AgentRegistered(agent_id="a1", hostname="h", slots=[ev.Slot(slot_id=0, type="cpu")])),
        (
            "trial/1",
            ev.TrialCreated(trial_id=1, experiment_id=1, hparams_json='{"lr": 1}', trial_seed=3, length=40),
        ),
        ("trial/2", ev.TrialCreated(trial_id=2, experiment_id=1, hparams_json='{"lr": 2}')),
        ("trial/3", ev.TrialCreated(trial_id=3, experiment_id=2)),
        ("allocation/1.1", requested(1, 1)),
        ("allocation/1.1", assigned("1.1")),
        ("allocation/1.1", ev.AllocationStarted(allocation_id="1.1", trial_id=1)),
        ("metrics/1", metrics(1, 10, 20)),
        (
            "checkpoint/c1",
            ev.CheckpointReported(
                uuid="c1",
                trial_id=1,
                experiment_id=1,
                steps_completed=10,
                resources={"a": 1, "b": 2},
                reported_at_ns=5,
            ),
        ),
        ("trial/1", ev.TrialStatusReported(trial_id=1, experiment_id=1, status="training")),
        ("allocation/1.1", ev.AllocationExited(allocation_id="1.1", trial_id=1, exit_code=1)),
        ("allocation/1.2", requested(1, 2, resumed_at=10)),
        ("allocation/1.2", assigned("1.2")),
        ("allocation/1.2", ev.AllocationStarted(allocation_id="1.2", trial_id=1)),
        ("metrics/1", metrics(2, 20, 30)),
        ("validation/1", validation),
        ("trial/1", ev.TrialProgressReported(trial_id=1, experiment_id=1, progress=0.5)),
        ("checkpoint/c2", ev.CheckpointReported(uuid="c2", trial_id=1, experiment_id=1, steps_completed=30)),
        ("trial/1", ev.TrialLengthSet(trial_id=1, experiment_id=1, rung=1, length=60)),
        (
            "trial/1",
            ev.TrialStopRequested(trial_id=1, experiment_id=1, reason="reached the top rung", rung=1),
        ),
        ("allocation/1.2", ev.AllocationStopRequested(allocation_id="1.2", task_id="1", reason="searcher")),
        ("allocation/1.2", ev.AllocationStopAcknowledged(allocation_id="1.2", task_id="1")),
        ("allocation/1.2", ev.AllocationExited(allocation_id="1.2", trial_id=1)),
        ("trial/1", ev.TrialEnded(trial_id=1, experiment_id=1, state=ev.TRIAL_STATE_COMPLETED)),
        ("allocation/2.1", old_assignment),
        ("allocation/2.1", ev.AllocationStarted(allocation_id="2.1", trial_id=2)),
        (
            "allocation/2.1",
            ev.AllocationExited(allocation_id="2.1", trial_id=2, exit_code=1, agent_lost=True),
        ),
        ("allocation/2.2", requested(2, 2)),
        ("allocation/2.2", ev.AllocationStarted(allocation_id="2.2", trial_id=2)),
        ("experiment/1", ev.ExperimentProgressChanged(experiment_id=1, progress=0.75)),
        ("trial/2", ev.TrialKillRequested(trial_id=2, experiment_id=1)),
        ("experiment/1", ev.ExperimentKillRequested(experiment_id=1)),
        ("allocation/2.2", ev.AllocationExited(allocation_id="2.2", trial_id=2, exit_code=137, killed=True)),
        (
            "trial/2",
            ev.TrialEnded(trial_id=2, experiment_id=1, state=ev.TRIAL_STATE_CANCELED, reason="killed"),
        ),
        ("experiment/1", ev.ExperimentStateChanged(experiment_id=1, state=ev.EXPERIMENT_STATE_CANCELED)),
        ("allocation/3.1", requested(3, 1)),
        ("allocation/3.1", ev.AllocationCanceled(allocation_id="3.1", task_id="3", reason="stopped")),
        ("trial/3", ev.TrialProgressReported(trial_id=3, experiment_id=2, progress=0.25)),
        ("experiment/2", ev.ExperimentStateChanged(experiment_id=2, state=ev.EXPERIMENT_STATE_COMPLETED)),
        (
            "experiment/2",
            ev.ExperimentDetailsSet(
                experiment_id=2, name="renamed", labels=ev.ExperimentLabels(labels=["a"])
            ),
        ),
        ("experiment/2", ev.ExperimentArchiveSet(experiment_id=2, archived=True)),
        *deletions(),
    ]


def deletions() -> list[tuple[str, Message]]:
    """The model registry and checkpoint deletion: c2 becomes a model version,
    c1 loses some of its files to a GC policy (the storage refused the rest),
    and experiment 3 is deleted: a first attempt fails, the second succeeds."""

    def requested_deletion(
        experiment_id: int, deletion_id: int, *uuids: str
    ) -> ev.CheckpointDeletionRequested:
        return ev.CheckpointDeletionRequested(
            experiment_id=experiment_id, deletion_id=deletion_id, uuids=uuids
        )

    version = ev.ModelVersionRegistered(
        model_name="m", model_id=1, version=1, checkpoint_uuid="c2", experiment_id=1, trial_id=1, owner="u"
    )
    return [
        ("model/m", ev.ModelCreated(model_id=1, name="m", owner="u", labels=["l"])),
        ("model/m", version),
        (
            "experiment/1",
            ev.CheckpointGcPolicyChanged(experiment_id=1, save_trial_best=0, save_trial_latest=0),
        ),
        ("experiment/1", requested_deletion(1, 1, "c1")),
        (
            "checkpoint/c1",
            ev.CheckpointPartiallyDeleted(
                uuid="c1",
                experiment_id=1,
                trial_id=1,
                deletion_id=1,
                remaining={"b": 2},
                error="b: access denied",
            ),
        ),
        ("experiment/3", ev.ExperimentCreated(experiment_id=3, name="g", owner="u", config_json=CONFIG)),
        ("trial/4", ev.TrialCreated(trial_id=4, experiment_id=3)),
        (
            "checkpoint/c3",
            ev.CheckpointReported(
                uuid="c3",
                trial_id=4,
                experiment_id=3,
                steps_completed=5,
                resources={"x": 3},
                reported_at_ns=9,
            ),
        ),
        ("experiment/3", ev.ExperimentStateChanged(experiment_id=3, state=ev.EXPERIMENT_STATE_COMPLETED)),
        ("experiment/3", ev.ExperimentDeleteRequested(experiment_id=3)),
        ("experiment/3", requested_deletion(3, 1, "c3")),
        (
            "checkpoint/c3",
            ev.CheckpointPartiallyDeleted(
                uuid="c3",
                experiment_id=3,
                trial_id=4,
                deletion_id=1,
                remaining={"x": 3},
                error="x: access denied",
            ),
        ),
        ("experiment/3", ev.ExperimentDeleteFailed(experiment_id=3, reason="c3: x: access denied")),
        ("experiment/3", ev.ExperimentDeleteRequested(experiment_id=3)),
        ("experiment/3", requested_deletion(3, 2, "c3")),
        (
            "checkpoint/c3",
            ev.CheckpointDeleted(uuid="c3", experiment_id=3, trial_id=4, deletion_id=2, bytes_freed=3),
        ),
        ("experiment/3", ev.ExperimentDeleted(experiment_id=3)),
    ]


@pytest.fixture
async def projected(event_store: EventStore, pool: asyncpg.Pool) -> list[StoredEvent]:
    """The history appended to the log and projected; the stored events."""
    for index, (aggregate_name, payload) in enumerate(history()):
        await event_store.append(Append(aggregate_name, payload, f"h-{index}"), actor="service:test")
    await Projector(event_store, pool).run(follow=False)
    return await _read_all(event_store)


async def dump(pool: asyncpg.Pool, *, with_position: bool = True) -> dict[str, list[tuple[object, ...]]]:
    """Every table's rows; without the position, also without the index by type (keyed by sequence)."""
    kept_out = () if with_position else ("projection_position", "event_types")
    tables = [t for t in metadata.sorted_tables if t.name not in kept_out]
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
        await projector.apply(doubled[start : start + 7])
    assert await dump(pool, with_position=False) == before
    indexed = await pool.fetch(f"SELECT sequence, event_type FROM {SCHEMA}.event_types ORDER BY sequence")
    assert [tuple(row) for row in indexed] == type_index.rows(doubled)  # each copy, at its own sequence


async def test_projected_history_reads_right(pool: asyncpg.Pool, projected: list[StoredEvent]) -> None:
    experiments = await pool.fetch(f"SELECT id, state, ended_at_ns FROM {SCHEMA}.experiments ORDER BY id")
    assert [(r["id"], r["state"]) for r in experiments] == [(1, "CANCELED"), (2, "COMPLETED"), (3, "DELETED")]
    [canceled] = [e for e in projected if e.envelope.experiment_state_changed.experiment_id == 1]
    assert experiments[0]["ended_at_ns"] == canceled.envelope.occurred_at_ns
    trial = await pool.fetchrow(f"SELECT * FROM {SCHEMA}.trials WHERE id = 1")
    assert (trial["state"], trial["total_batches"], trial["current_allocation_id"], trial["runs"]) == (
        "COMPLETED",
        30,
        "1.2",
        2,
    )
    assert (trial["rung"], trial["searcher_length"], trial["status"]) == (1, 60, "training")
    points = await pool.fetch(
        f'SELECT "group", steps_completed, trial_run_id, superseded FROM {SCHEMA}.metrics'
        ' ORDER BY "group", steps_completed, trial_run_id'
    )
    assert [tuple(p) for p in points] == [
        ("training", 10, 1, False),
        ("training", 20, 1, True),
        ("training", 20, 2, False),
        ("training", 30, 2, False),
        ("validation", 30, 2, False),
    ]
    canceled_run = await pool.fetchrow(f"SELECT * FROM {SCHEMA}.allocations WHERE allocation_id = '3.1'")
    assert canceled_run["canceled"] and canceled_run["placements"] is None
    queries = Queries(pool)
    trials = await queries.trials.trials(1)
    # 1.1 failed (a restart); 2.1 was lost with its agent and 2.2 killed (neither is).
    assert [(t.state, t.restarts, t.runs) for t in trials] == [("COMPLETED", 1, 2), ("CANCELED", 0, 2)]
    assert [t.end_reason for t in trials] == ["reached the top rung", "killed"]
    assert trials[0].latest_validation.metrics_json == '{"loss": 0.3}'
    assert trials[0].latest_training.steps_completed == 30
    shown = [(p.group, p.steps_completed) for p in await queries.trials.recent_metrics(1)]
    assert shown == [("training", 10), ("training", 20), ("training", 30), ("validation", 30)]
    # Experiment 1's progress is the searcher's; experiment 2 COMPLETED.
    assert [e.progress for e in await queries.experiments.experiments()] == [0.75, 1.0]
    assert await queries.experiments.best_validation(1) == 0.3
    assert await queries.experiments.best_validation(2) is None


async def test_projected_deletions_and_registry_read_right(
    pool: asyncpg.Pool, projected: list[StoredEvent]
) -> None:
    checkpoints = await pool.fetch(
        f"SELECT uuid, state, resources::text, deletion_id, delete_error FROM {SCHEMA}.checkpoints ORDER BY uuid"
    )
    assert [tuple(row) for row in checkpoints] == [
        ("c1", "PARTIALLY_DELETED", '{"b": 2}', 1, "b: access denied"),
        ("c2", "COMPLETED", "{}", 0, ""),
        ("c3", "DELETED", "{}", 2, ""),
    ]
    experiments = await pool.fetch(
        f"SELECT id, state, jsonb_array_length(delete_requests) AS delete_requests, config_json"
        f" FROM {SCHEMA}.experiments ORDER BY id"
    )
    assert [(row["id"], row["state"], row["delete_requests"]) for row in experiments] == [
        (1, "CANCELED", 0),
        (2, "COMPLETED", 0),
        (3, "DELETED", 2),
    ]
    storage = json.loads(experiments[0]["config_json"])["checkpoint_storage"]
    assert storage == {"save_experiment_best": 0, "save_trial_best": 0, "save_trial_latest": 0}
    assert [e.id for e in await Queries(pool).experiments.experiments()] == [
        1,
        2,
    ]  # a deleted experiment is not listed
    models = await pool.fetch(f"SELECT name, model_id, labels::text FROM {SCHEMA}.models")
    assert [tuple(row) for row in models] == [("m", 1, '["l"]')]
    versions = await pool.fetch(f"SELECT id, checkpoint_uuid, version FROM {SCHEMA}.model_versions")
    assert [tuple(row) for row in versions] == [("m:1", "c2", 1)]


async def _read_all(store: EventStore) -> list[StoredEvent]:
    last = await store.last_sequence()
    events = []
    async with contextlib.aclosing(cast(AsyncGenerator[StoredEvent, None], store.read(None))) as stream:
        async for stored in stream:
            events.append(stored)
            if stored.sequence >= last:
                break
    return events
