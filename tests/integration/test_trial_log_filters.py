"""det trial logs' filters in the gateway, over a real nats-server: --head and
--tail (the last lines read from the end: only the batches holding them),
--tail with a filter that keeps few lines, --tail with -f on an ended trial,
a filter that is not one. One module-wide gateway; the trials' batches are
interleaved in the LOGS stream as several trials' are."""

from collections.abc import AsyncIterator

import grpc
import pytest
from support import module_gateway
from support.security_gateway import PASSWORD

from determined.common.passwords import salted_hash
from determined.proto import api_pb2, api_pb2_grpc, events_pb2
from services.common.envelope import Append
from services.common.eventstore import EventStore
from services.common.trial_logs import StoredLogBatch
from services.gateway.features.logs import filters, stream, tail
from services.gateway.server import Gateway

module_namespace = module_gateway.module_namespace
gateway = module_gateway.gateway
store = module_gateway.store
stub = module_gateway.stub

Metadata = tuple[tuple[str, str], ...]
BATCHES = 40
LINES_PER_BATCH = 10
# Trial 1: 40 batches of 10 lines, every tenth line a WARNING; trial 2's batches between them.
# Trial 3: ended, its last batch closing its allocation.
TRIAL, OTHER, ENDED = 1, 2, 3


def line_text(batch: int, line: int) -> str:
    level = "WARNING" if line == 9 else "INFO"
    return f"{level}: batch {batch} line {line}"


def log_batch(trial_id: int, batch: int, *, ended: bool = False) -> events_pb2.LogBatch:
    lines = [
        events_pb2.LogLine(timestamp_ns=batch * 100 + line + 1, stdtype="stdout", log=line_text(batch, line))
        for line in range(LINES_PER_BATCH)
    ]
    return events_pb2.LogBatch(
        trial_id=trial_id, allocation_id=f"{trial_id}.1", agent_id="a1", lines=lines, allocation_ended=ended
    )


@pytest.fixture(scope="module")
async def admin(stub: api_pb2_grpc.DeterminedStub, store: EventStore, gateway: Gateway) -> Metadata:
    """The trials and their logs; the admin's token."""
    for trial_id in (TRIAL, OTHER, ENDED):
        created = events_pb2.TrialCreated(trial_id=trial_id, experiment_id=1, hparams_json="{}")
        await store.append(
            Append(f"trial/{trial_id}", created, f"trial-{trial_id}"), actor="service:searcher"
        )
    for batch in range(BATCHES):
        await store.logs.publish(log_batch(TRIAL, batch))
        await store.logs.publish(log_batch(OTHER, batch))
    for batch in range(3):
        await store.logs.publish(log_batch(ENDED, batch, ended=batch == 2))
    ended = events_pb2.TrialEnded(trial_id=ENDED, experiment_id=1, state=events_pb2.TRIAL_STATE_COMPLETED)
    await store.append(Append(f"trial/{ENDED}", ended, "ended-3"), actor="service:searcher")
    assert await gateway.projector.catch_up()
    login = api_pb2.LoginRequest(username="admin", password=salted_hash(PASSWORD), is_hashed=True)
    return (("authorization", f"Bearer {(await stub.Login(login)).token}"),)


async def logs(stub: api_pb2_grpc.DeterminedStub, admin: Metadata, **fields: object) -> list[str]:
    request = api_pb2.TrialLogsRequest(**fields)  # type: ignore[arg-type]
    return [line.log async for response in stub.TrialLogs(request, metadata=admin) for line in response.lines]


async def test_head_is_the_first_lines(stub: api_pb2_grpc.DeterminedStub, admin: Metadata) -> None:
    assert await logs(stub, admin, trial_id=TRIAL, limit=12) == [line_text(0, n) for n in range(10)] + [
        line_text(1, 0),
        line_text(1, 1),
    ]


async def test_tail_is_the_last_lines(stub: api_pb2_grpc.DeterminedStub, admin: Metadata) -> None:
    assert await logs(stub, admin, trial_id=TRIAL, limit=12, tail=True) == [
        line_text(38, 8),
        line_text(38, 9),
    ] + [line_text(39, n) for n in range(10)]
    every = await logs(stub, admin, trial_id=TRIAL, limit=10_000, tail=True)
    assert len(every) == BATCHES * LINES_PER_BATCH


async def test_tail_with_a_filter_reads_back_until_it_has_enough(
    stub: api_pb2_grpc.DeterminedStub, admin: Metadata
) -> None:
    warnings = await logs(stub, admin, trial_id=TRIAL, limit=7, tail=True, levels=["WARNING"])
    assert warnings == [line_text(batch, 9) for batch in range(33, 40)]


def counted(store: EventStore, subject: str, read: list[int]) -> tail.StoredFrom:
    async def stored_from(start: int) -> AsyncIterator[StoredLogBatch]:
        async for stored in stream._stored_logs(store, subject, start):
            read.append(stored.batch.trial_id)
            yield stored

    return stored_from


@pytest.mark.parametrize(("count", "batches_read"), [(1, 2), (10, 2), (25, 2 + 4), (400, 2 + 40)])
async def test_tail_reads_only_the_batches_that_hold_the_last_lines(
    store: EventStore, admin: Metadata, count: int, batches_read: int
) -> None:
    """A first read of 2 batches, then as many as the rate seen asks (with a margin)."""
    read: list[int] = []
    subject = store.logs.subject(TRIAL)
    chosen = filters.line_filter(api_pb2.TrialLogsRequest(trial_id=TRIAL))

    def kept(stored: StoredLogBatch) -> list[api_pb2.TrialLogsResponse]:
        return [r for r in stream.responses(stored) if filters.kept(r, chosen)]

    last, after = await tail.last_lines(store, subject, count, kept, counted(store, subject, read))
    assert filters.line_count(last) == count
    assert (len(read), set(read)) == (batches_read, {TRIAL})
    assert after == await store.reader.last_sequence_of(store.logs.stream, [subject]) + 1


async def test_tail_and_follow_of_an_ended_trial_ends_after_its_last_lines(
    stub: api_pb2_grpc.DeterminedStub, admin: Metadata
) -> None:
    followed = await logs(stub, admin, trial_id=ENDED, limit=3, tail=True, follow=True)
    assert followed == [line_text(2, n) for n in (7, 8, 9)]
    assert len(await logs(stub, admin, trial_id=ENDED, follow=True)) == 30


async def test_a_trial_without_logs_has_no_tail(stub: api_pb2_grpc.DeterminedStub, admin: Metadata) -> None:
    assert await logs(stub, admin, trial_id=OTHER, limit=5, tail=True, agent_ids=["elsewhere"]) == []


async def test_a_filter_that_is_not_one_is_refused(
    stub: api_pb2_grpc.DeterminedStub, admin: Metadata
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await logs(stub, admin, trial_id=TRIAL, levels=["LOUD"])
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "level 'LOUD'" in str(refused.value.details())
