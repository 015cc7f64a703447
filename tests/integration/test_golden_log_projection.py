"""A recorded log projects into the read models a user expects to see."""

import json

import asyncpg
from golden_log import golden_log

from services.common.eventstore import EventStore, StoredEvent
from services.gateway.projector import Projector
from services.gateway.queries import Queries


async def test_recorded_log_projects_the_experiments_users_saw(
    event_store: EventStore, pool: asyncpg.Pool
) -> None:
    log = golden_log("three_experiments.jsonl")
    stored = [StoredEvent(sequence, envelope, caught_up=False) for sequence, envelope in enumerate(log, 1)]
    await Projector(event_store, pool).apply(stored)
    queries = Queries(pool)

    assert [(e.id, e.name, e.state) for e in await queries.experiments()] == [
        (1, "mnist-const", "COMPLETED"),
        (2, "failing", "ERROR"),
        (3, "killed", "CANCELED"),
    ]
    completed, failed, killed = [(await queries.trials(i))[0] for i in (1, 2, 3)]
    assert (completed.state, completed.total_batches, completed.progress) == ("COMPLETED", 100, 1.0)
    assert json.loads(completed.latest_validation.metrics_json) == {"validation_loss": 0.01}
    assert completed.latest_checkpoint.steps_completed == 100
    assert (failed.state, failed.restarts) == ("ERROR", 1)
    assert killed.state == "CANCELED"
