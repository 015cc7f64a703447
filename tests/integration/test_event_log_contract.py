"""The EventLog contract (services/common/eventlog.py), run against both
implementations (the `event_log` and `event_logs` fixtures, tests/support/
event_logs.py): the NATS EventStore on a real nats-server, and the in-memory
MemoryEventLog. A behaviour a shell relies on is written here once; each
implementation must pass all of it."""

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator
from typing import cast

import pytest
from support.event_logs import EventLogs

from determined.proto import events_pb2
from services.common.envelope import Append, subject_for
from services.common.eventlog import SNAPSHOTS_BUCKET, ConflictError, EventLog, RefusedEventError, StoredEvent


def created(experiment_id: int, msg_id: str, expected_version: int | None = 0) -> Append:
    payload = events_pb2.ExperimentCreated(experiment_id=experiment_id)
    return Append(f"experiment/{experiment_id}", payload, msg_id, expected_version=expected_version)


def trial(trial_id: int, experiment_id: int = 1) -> Append:
    payload = events_pb2.TrialCreated(trial_id=trial_id, experiment_id=experiment_id)
    return Append(f"trial/{trial_id}", payload, f"trial-{trial_id}")


async def stored(log: EventLog, kinds: list[str] | None = None, start: int = 1) -> list[StoredEvent]:
    return [event async for event in log.read(kinds, start_sequence=start, follow=False)]


async def test_an_append_is_stored_as_decided(event_log: EventLog) -> None:
    sequence, envelope = await event_log.append(trial(3), actor="service:searcher")
    [event] = await stored(event_log)
    assert (sequence, event.sequence) == (1, 1)
    assert event.envelope == envelope
    assert (envelope.event_id, envelope.aggregate, envelope.actor) == (
        "trial-3",
        "trial/3",
        "service:searcher",
    )
    assert envelope.correlation_id == "trial-3"  # it starts its own chain
    assert envelope.trial_created.trial_id == 3


async def test_a_repeated_append_is_stored_once(event_log: EventLog) -> None:
    first, _ = await event_log.append(created(1, "create-a"), actor="user:determined")
    again, _ = await event_log.append(created(1, "create-a"), actor="user:determined")
    other, _ = await event_log.append(trial(1), actor="service:searcher")
    repeated, _ = await event_log.append(trial(1), actor="service:searcher")
    assert (first, again, other, repeated) == (1, 1, 2, 2)
    assert await event_log.last_sequence() == 2


async def test_an_expected_version_refuses_a_second_writer(event_log: EventLog) -> None:
    await event_log.append(created(1, "create-a"), actor="user:x")
    with pytest.raises(ConflictError):
        await event_log.append(created(1, "create-b"), actor="user:x")
    last = await event_log.last_event("experiment/1")
    assert last is not None and last.envelope.event_id == "create-a"
    sequence, _ = await event_log.append(created(1, "create-c", last.sequence), actor="user:x")
    assert sequence == 2
    assert [e.envelope.event_id for e in await stored(event_log)] == ["create-a", "create-c"]


async def test_a_retry_of_a_landed_append_with_a_version_returns_the_original(event_log: EventLog) -> None:
    first, envelope = await event_log.append(created(1, "create-a"), actor="user:x")
    again, stored_envelope = await event_log.append(created(1, "create-a"), actor="user:x")
    assert again == first
    assert stored_envelope.event_id == envelope.event_id
    assert await event_log.last_sequence() == 1


async def test_reads_filter_kinds_and_stop_at_the_end(event_log: EventLog) -> None:
    await event_log.append(created(1, "create-a"), actor="user:x")
    await event_log.append(trial(1), actor="service:searcher")
    await event_log.append(created(2, "create-b"), actor="user:x")
    trials = await stored(event_log, ["trial"])
    everything = await stored(event_log)
    assert [(e.sequence, e.envelope.WhichOneof("payload")) for e in trials] == [(2, "trial_created")]
    assert [e.sequence for e in everything] == [1, 2, 3]
    assert [e.sequence for e in await stored(event_log, ["experiment", "trial"], start=2)] == [2, 3]
    assert everything[-1].caught_up and trials[-1].caught_up
    assert await stored(event_log, ["agent"]) == []
    assert await stored(event_log, start=4) == []


async def test_read_batches_give_what_read_gives(event_log: EventLog) -> None:
    for trial_id in range(1, 6):
        await event_log.append(trial(trial_id), actor="service:searcher")
    batches = [batch async for batch in event_log.read_batches(["trial"], start_sequence=2, follow=False)]
    assert [e for batch in batches for e in batch] == await stored(event_log, ["trial"], start=2)
    assert batches[-1][-1].caught_up


async def test_a_following_read_gets_what_comes_later(event_log: EventLog) -> None:
    await event_log.append(trial(1), actor="service:searcher")
    reading = cast(AsyncGenerator[StoredEvent, None], event_log.read(["trial"], follow=True))
    async with contextlib.aclosing(reading) as following:
        first = await anext(following)
        assert (first.sequence, first.caught_up) == (1, True)
        later = asyncio.ensure_future(anext(following))
        await asyncio.sleep(0.2)
        assert not later.done()
        await event_log.append(created(1, "create-a"), actor="user:x")  # another kind: not given
        await event_log.append(trial(2), actor="service:searcher")
        second = await asyncio.wait_for(later, 30)
        assert (second.sequence, second.envelope.event_id, second.caught_up) == (3, "trial-2", True)


async def test_reads_of_named_aggregates_give_exactly_theirs(event_log: EventLog) -> None:
    for trial_id in (1, 2, 11, 12):
        await event_log.append(trial(trial_id), actor="service:searcher")
    await event_log.append(created(1, "create-a"), actor="user:x")
    await event_log.append(Append("trial/1", events_pb2.TrialEnded(trial_id=1), "end-1"), actor="s")
    allocation = Append("allocation/1.1", events_pb2.AllocationRequested(allocation_id="1.1"), "request-1.1")
    await event_log.append(allocation, actor="service:searcher")

    async def read(aggregates: list[str], start: int = 1) -> list[int]:
        reading = event_log.read(["agent"], start_sequence=start, follow=False, aggregates=aggregates)
        return [event.sequence async for event in reading]

    assert await read(["trial/1"]) == [1, 6]  # not trial/11 or trial/12; the kinds are ignored
    assert await read(["trial/1", "experiment/1", "allocation/1.1"]) == [1, 5, 6, 7]
    assert await read(["trial/1", "allocation/1.1", "trial/1"], start=2) == [6, 7]
    assert await read(["trial/3"]) == []
    batches = [b async for b in event_log.read_batches(follow=False, aggregates=["trial/2", "trial/12"])]
    events = [event for batch in batches for event in batch]
    assert [e.sequence for e in events] == [2, 4] and events[-1].caught_up


async def test_a_following_read_of_aggregates_gets_theirs_later(event_log: EventLog) -> None:
    await event_log.append(trial(1), actor="service:searcher")
    reading = event_log.read(follow=True, aggregates=["trial/1", "trial/2"])
    async with contextlib.aclosing(cast(AsyncGenerator[StoredEvent, None], reading)) as following:
        assert (await anext(following)).sequence == 1
        later = asyncio.ensure_future(anext(following))
        await event_log.append(trial(3), actor="service:searcher")
        await event_log.append(trial(2), actor="service:searcher")
        second = await asyncio.wait_for(later, 30)
        assert (second.sequence, second.envelope.event_id) == (3, "trial-2")


async def test_the_first_sequence_at_a_time(event_log: EventLog) -> None:
    before = time.time_ns()
    assert await event_log.first_sequence_at(before) == 1
    await event_log.append(trial(1), actor="service:searcher")
    await event_log.append(trial(2), actor="service:searcher")
    [_, second] = await stored(event_log)
    await asyncio.sleep(0.01)  # the stored times of the next events are after `middle`
    middle = time.time_ns()
    await event_log.append(trial(3), actor="service:searcher")
    assert await event_log.first_sequence_at(before) == 1
    assert await event_log.first_sequence_at(second.envelope.occurred_at_ns - 10**9) == 1
    assert await event_log.first_sequence_at(middle) == 3
    assert await event_log.first_sequence_at(time.time_ns() + 10**9) == 4


async def test_positions_versions_and_newest_events(event_log: EventLog) -> None:
    assert (await event_log.last_sequence(), await event_log.last_sequence_of(["trial"])) == (0, 0)
    assert await event_log.last_event("trial/1") is None
    await event_log.append(trial(1), actor="service:searcher")
    await event_log.append(created(1, "create-a"), actor="user:x")
    await event_log.append(trial(2), actor="service:searcher")
    await event_log.append(Append("trial/1", events_pb2.TrialEnded(trial_id=1), "end-1"), actor="s")
    assert await event_log.last_sequence() == 4
    assert await event_log.last_sequence_of(["experiment"]) == 2
    assert await event_log.last_sequence_of(["experiment", "trial"]) == 4
    assert await event_log.last_sequence_of(["agent"]) == 0
    newest = await event_log.last_event("trial/1")
    assert newest is not None and (newest.sequence, newest.envelope.event_id) == (4, "end-1")
    assert await event_log.aggregate_versions("trial") == {"1": 2, "2": 1}
    assert await event_log.aggregate_versions("agent") == {}


async def test_an_event_that_is_not_well_formed_is_refused(event_log: EventLog) -> None:
    wrong_aggregate = Append("trial/2", events_pb2.TrialCreated(trial_id=1), "t")
    with pytest.raises(RefusedEventError, match="names 1 id"):
        await event_log.append(wrong_aggregate, actor="service:searcher")
    assert await event_log.last_sequence() == 0


async def test_a_part_appends_only_its_own_event_types(event_logs: EventLogs) -> None:
    searcher = await event_logs.open(frozenset({"trial_created"}))
    await searcher.append(trial(1), actor="service:searcher")
    with pytest.raises(RefusedEventError, match="experiment_created is not an event this part appends"):
        await searcher.append(created(1, "create-a"), actor="service:searcher")
    assert await searcher.last_sequence() == 1


async def test_what_no_reader_can_read_is_skipped_and_recorded(event_logs: EventLogs) -> None:
    log = await event_logs.open()
    await log.append(trial(1), actor="service:searcher")
    poison = await event_logs.publish_raw(log, subject_for(log.namespace, "trial/2"), b"\xff not an envelope")
    await log.append(trial(3), actor="service:searcher")
    events = await stored(log, ["trial"])
    assert [(e.sequence, bool(e.skipped)) for e in events] == [(1, False), (poison, True), (3, False)]
    assert events[1].envelope.WhichOneof("payload") is None
    assert "not an event envelope" in events[1].skipped
    assert log.skips.count == 1


async def test_events_at_sequences_are_read_each_on_its_own(event_logs: EventLogs) -> None:
    log = await event_logs.open()
    for trial_id in (1, 2, 3):
        await log.append(trial(trial_id), actor="service:searcher")
    poison = await event_logs.publish_raw(log, subject_for(log.namespace, "trial/4"), b"\xff not an envelope")
    found = await log.events_at([3, 1, 99, poison])
    assert [(e.sequence, e.envelope.event_id, bool(e.skipped)) for e in found] == [
        (3, "trial-3", False),
        (1, "trial-1", False),
        (poison, "", True),
    ]
    assert await log.events_at([]) == []


async def test_values_kept_beside_the_log(event_log: EventLog) -> None:
    assert await event_log.get_value(SNAPSHOTS_BUCKET, "searcher.Core") is None
    await event_log.put_value(SNAPSHOTS_BUCKET, "searcher.Core", b"one")
    await event_log.put_value(SNAPSHOTS_BUCKET, "searcher.Core", b"two")
    await event_log.put_value(SNAPSHOTS_BUCKET, "scheduler.Core", b"other")
    assert await event_log.get_value(SNAPSHOTS_BUCKET, "searcher.Core") == b"two"
    assert await event_log.get_value(SNAPSHOTS_BUCKET, "scheduler.Core") == b"other"
    assert await event_log.get_value("another_bucket", "searcher.Core") is None
    assert event_log.max_value_bytes >= 1024 * 1024
