"""The projector shell: it resumes from its stored position, skips what it
applied already, and follows the log as it grows."""

import asyncio

import asyncpg

from determined.proto import events_pb2
from services.common.envelope import Append
from services.common.eventlog import StoredEvent
from services.common.eventstore import EventStore
from services.gateway.projector import Projector, load_position
from services.gateway.read_models import SCHEMA


def trial_created(trial_id: int) -> Append:
    payload = events_pb2.TrialCreated(trial_id=trial_id, experiment_id=1)
    return Append(f"trial/{trial_id}", payload, f"trial-{trial_id}")


def progress(trial_id: int, value: float) -> Append:
    payload = events_pb2.TrialProgressReported(trial_id=trial_id, experiment_id=1, progress=value)
    return Append(f"trial/{trial_id}", payload, f"progress-{trial_id}-{value}")


async def test_resumes_from_the_stored_position(event_store: EventStore, pool: asyncpg.Pool) -> None:
    await event_store.append(trial_created(1), actor="service:test")
    await Projector(event_store, pool).run(follow=False)
    await event_store.append(trial_created(2), actor="service:test")
    resumed = Projector(event_store, pool)
    await resumed.run(follow=False)
    assert resumed.position == 2 == await load_position(pool)
    assert await pool.fetchval(f"SELECT count(*) FROM {SCHEMA}.trials") == 2


async def test_skips_events_at_or_below_the_position(event_store: EventStore, pool: asyncpg.Pool) -> None:
    await event_store.append(trial_created(1), actor="service:test")
    sequence, envelope = await event_store.append(progress(1, 0.5), actor="service:test")
    projector = Projector(event_store, pool)
    await projector.run(follow=False)
    stale = events_pb2.Envelope()
    stale.CopyFrom(envelope)
    stale.trial_progress_reported.progress = 0.9
    await projector.apply([StoredEvent(sequence, stale, False)])
    assert await pool.fetchval(f"SELECT progress FROM {SCHEMA}.trials WHERE id = 1") == 0.5


async def test_follows_the_log(event_store: EventStore, pool: asyncpg.Pool) -> None:
    projector = Projector(event_store, pool)
    task = asyncio.create_task(projector.run())
    try:
        for trial_id in range(1, 51):
            await event_store.append(trial_created(trial_id), actor="service:test")
        assert await projector.wait_for(50)
        assert await pool.fetchval(f"SELECT count(*) FROM {SCHEMA}.trials") == 50
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
