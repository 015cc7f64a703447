"""What the NATS event store has beside the EventLog contract
(test_event_log_contract.py), against a real nats-server: the context
folders, the trial logs, and the replay's fast path with its fallback."""

import asyncio

import pytest
import structlog

from determined.proto import events_pb2
from services.common import fast_delivery, stream_reading
from services.common.envelope import Append
from services.common.eventstore import EventStore
from services.common.fast_delivery import DirectDelivery, PublicDelivery


async def test_contexts_are_stored_once_by_hash(event_store: EventStore) -> None:
    contexts = event_store.contexts
    digests = await asyncio.gather(contexts.put(b"abc"), contexts.put(b"abc"))
    assert digests[0] == digests[1]
    assert await contexts.get(digests[0]) == b"abc"
    assert await contexts.size(digests[0]) == 3


async def test_trial_logs_are_read_per_trial_and_stored_once(event_store: EventStore) -> None:
    logs = event_store.logs
    for trial_id, text in ((1, "one"), (2, "two"), (1, "three")):
        batch = events_pb2.LogBatch(trial_id=trial_id, lines=[events_pb2.LogLine(log=text)])
        await logs.publish(batch, msg_id=f"{trial_id}-{text}")
    await logs.publish(events_pb2.LogBatch(trial_id=1), msg_id="1-three")  # a retry: dropped
    read = [stored async for stored in logs.read(1, follow=False)]
    assert [[line.log for line in stored.batch.lines] for stored in read] == [["one"], ["three"]]
    assert read[-1].caught_up


async def test_without_the_fast_path_a_replay_reads_the_same_events(
    event_store: EventStore, nats_url: str, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a nats-py other than the one the fast path was written for, the
    replay reads through nats-py's public API, saying why once: the same
    events, in the same order, with the same positions."""
    assert isinstance(event_store.reader._direct, DirectDelivery)
    monkeypatch.setattr(stream_reading, "PULL_BATCH", 40)  # several pull requests per kind
    monkeypatch.setattr(stream_reading, "PULL_AHEAD", 80)
    for n in range(1, 300):
        experiment = Append(f"experiment/{n}", events_pb2.ExperimentCreated(experiment_id=n), f"e-{n}")
        trial = Append(f"trial/{n}", events_pb2.TrialCreated(trial_id=n, experiment_id=n), f"t-{n}")
        await asyncio.gather(
            event_store.append(experiment, actor="user:x"), event_store.append(trial, actor="s")
        )
    fast = [await _replayed(event_store, kinds) for kinds in (None, ["trial"], ["experiment", "trial"])]
    monkeypatch.setattr(fast_delivery, "WRITTEN_FOR", "0.0.0-not-installed")
    with structlog.testing.capture_logs() as logs:
        slow_stores = [await EventStore.connect(nats_url, namespace) for _ in range(2)]
    try:
        assert all(isinstance(store.reader._direct, PublicDelivery) for store in slow_stores)
        slow = [
            await _replayed(slow_stores[0], kinds) for kinds in (None, ["trial"], ["experiment", "trial"])
        ]
    finally:
        for store in slow_stores:
            await store.close()
    assert slow == fast
    assert [len(replayed) for replayed in fast] == [598, 299, 598]
    [said] = [entry for entry in logs if entry["event"] == "nats_fast_read_off"]
    assert "0.0.0-not-installed" in said["reason"]


async def _replayed(store: EventStore, kinds: list[str] | None) -> list[tuple[int, str, bool]]:
    return [
        (stored.sequence, stored.envelope.SerializeToString().hex(), stored.caught_up)
        async for stored in store.read(kinds, follow=False)
    ]


async def test_a_replay_of_aggregates_gets_each_in_batches_up_to_the_stored_end(
    event_store: EventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Several aggregates are replayed by batched direct gets of each subject
    (stream_reading._direct_batches), merged in stream order, from the start
    sequence to the end stored when the read began."""
    monkeypatch.setattr(stream_reading, "DIRECT_BATCH", 2)  # several gets per aggregate
    for n in range(1, 6):
        for trial_id in (1, 2, 3):
            ended = Append(
                f"trial/{trial_id}", events_pb2.TrialEnded(trial_id=trial_id), f"end-{trial_id}-{n}"
            )
            await event_store.append(ended, actor="s")
    read = event_store.read(None, 4, follow=False, aggregates=["trial/3", "trial/1", "trial/9"])
    assert [stored.sequence async for stored in read] == [4, 6, 7, 9, 10, 12, 13, 15]
    subjects = [event_store.subject("trial/1"), event_store.subject("trial/2")]
    replay = event_store.reader._merged_batches(event_store.events_stream, subjects, 1, 10)
    merged = [message async for batch in replay for message in batch]
    assert [(sequence, caught_up) for sequence, _, caught_up, _ in merged] == [
        (1, False),
        (2, False),
        (4, False),
        (5, False),
        (7, False),
        (8, False),
        (10, True),
    ]
