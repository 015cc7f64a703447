"""A long stretch of the log replayed with a helper process
(services/gateway/replay.py) gives the rows of the in-process projection,
and the projector follows the log in-process from where the helper stopped."""

import asyncio
from types import SimpleNamespace
from typing import cast

import asyncpg
import pytest
from support.golden_log import golden_log, stored_as_recorded
from test_projection_digests import EXPECTED, digests

from determined.proto import events_pb2
from services.common.envelope import Append
from services.common.eventstore import EventStore
from services.gateway import replay
from services.gateway.projector import Projector
from services.gateway.read_models import SCHEMA

LOG = "generated_cluster.jsonl.gz"


async def test_a_replay_helper_gives_the_rows_of_the_in_process_projection(
    event_store: EventStore, pool: asyncpg.Pool
) -> None:
    await stored_as_recorded(event_store, golden_log(LOG))
    projector = Projector(event_store, pool, batch_size=700, helper_min_events=1)
    await projector.run(follow=False)
    assert projector.position == len(golden_log(LOG))
    assert await digests(pool) == EXPECTED[LOG]


async def test_the_projector_follows_on_from_where_the_helper_stopped(
    event_store: EventStore, pool: asyncpg.Pool
) -> None:
    log = golden_log(LOG)
    await stored_as_recorded(event_store, log[:1000])
    projector = Projector(event_store, pool, batch_size=300, helper_min_events=1)
    following = asyncio.create_task(projector.run())
    try:
        assert await projector.wait_for(1000, timeout_s=60)
        created = events_pb2.TrialCreated(trial_id=9999, experiment_id=1)
        sequence, _ = await event_store.append(
            Append("trial/9999", created, "trial-9999"), actor="service:test"
        )
        assert await projector.wait_for(sequence, timeout_s=30)
        assert await pool.fetchval(f"SELECT count(*) FROM {SCHEMA}.trials WHERE id = 9999") == 1
    finally:
        following.cancel()
        await asyncio.gather(following, return_exceptions=True)


async def test_a_helper_that_fails_is_an_error_not_a_wait(event_store: EventStore) -> None:
    """(The projector loads the helper's plans ahead, in a task of its own.)"""
    unreadable = SimpleNamespace(connection=event_store.connection, namespace="no such namespace")
    with pytest.raises(replay.ReplayHelperError, match="exit code 1"):
        async with asyncio.timeout(60):
            async for _ in replay.planned(cast(EventStore, unreadable), 1, 10, 100):
                pass
