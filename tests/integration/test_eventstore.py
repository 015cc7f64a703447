"""The event store client against a real nats-server."""

import asyncio

import pytest

from determined.proto import events_pb2
from services.common.envelope import Append
from services.common.eventstore import ConflictError, EventStore


def created(experiment_id: int, msg_id: str) -> Append:
    return Append(
        f"experiment/{experiment_id}",
        events_pb2.ExperimentCreated(experiment_id=experiment_id),
        msg_id,
        expected_version=0,
    )


async def test_retried_append_is_stored_once(event_store: EventStore) -> None:
    first, _ = await event_store.append(created(1, "create-a"), actor="user:determined")
    again, _ = await event_store.append(created(1, "create-a"), actor="user:determined")
    assert first == again
    assert await event_store.last_sequence() == 1


async def test_expected_version_refuses_a_second_writer(event_store: EventStore) -> None:
    await event_store.append(created(1, "create-a"), actor="user:determined")
    with pytest.raises(ConflictError):
        await event_store.append(created(1, "create-b"), actor="user:determined")


async def test_read_filters_kinds_and_stops_at_the_end(event_store: EventStore) -> None:
    await event_store.append(created(1, "create-a"), actor="user:x")
    trial = Append("trial/1", events_pb2.TrialCreated(trial_id=1, experiment_id=1), "trial-1")
    await event_store.append(trial, actor="service:searcher")
    trials = [e async for e in event_store.read(["trial"], follow=False)]
    everything = [e async for e in event_store.read(None, follow=False)]
    assert [e.envelope.WhichOneof("payload") for e in trials] == ["trial_created"]
    assert [e.sequence for e in everything] == [1, 2]
    assert everything[-1].caught_up
    assert [e async for e in event_store.read(["agent"], follow=False)] == []


async def test_contexts_are_stored_once_by_hash(event_store: EventStore) -> None:
    digests = await asyncio.gather(event_store.put_context(b"abc"), event_store.put_context(b"abc"))
    assert digests[0] == digests[1]
    assert await event_store.get_context(digests[0]) == b"abc"
