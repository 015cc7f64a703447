"""det events by type through the index by type (features/events/type_index.py,
typed_reading.py) on a real gateway (one for the module): the same events
as the scan of the types' kinds gives, with any filter, also when the
projector is behind the log, and then following it."""

import asyncio
import contextlib
from collections.abc import AsyncGenerator
from typing import cast

import asyncpg
import pytest
from support import module_gateway
from support.security_gateway import PASSWORD

from determined.common.passwords import salted_hash
from determined.proto import api_pb2, api_pb2_grpc
from determined.proto import events_pb2 as ev
from services.common.envelope import Append, subject_for
from services.common.eventstore import EventStore, Raw
from services.gateway.features.events import type_index
from services.gateway.features.events.filters import EVENT_TYPES
from services.gateway.features.events.queries import EventScopeQueries
from services.gateway.features.events.typed_reading import read_typed
from services.gateway.server import Gateway

Metadata = tuple[tuple[str, str], ...]
TRIALS = 30
STOP = "TrialStopRequested"

module_namespace = module_gateway.module_namespace
gateway = module_gateway.gateway
store = module_gateway.store
stub = module_gateway.stub


@pytest.fixture(scope="module")
async def admin(stub: api_pb2_grpc.DeterminedStub, store: EventStore, gateway: Gateway) -> Metadata:
    """The admin's login, and a log of trials' progress reports (not indexed)
    and stop requests (indexed), a malformed message among them."""
    login = api_pb2.LoginRequest(username="admin", password=salted_hash(PASSWORD), is_hashed=True)
    token = (await stub.Login(login)).token
    for trial_id in range(1, TRIALS + 1):
        for step in range(3):
            progress = ev.TrialProgressReported(trial_id=trial_id, experiment_id=1, progress=step / 3)
            await store.append(Append(f"trial/{trial_id}", progress, f"p-{trial_id}-{step}"), actor="trial")
        if trial_id % 3:
            stop = ev.TrialStopRequested(trial_id=trial_id, experiment_id=1, reason=f"cut {trial_id}")
            await store.append(
                Append(f"trial/{trial_id}", stop, f"stop-{trial_id}"), actor="service:searcher"
            )
        if trial_id == TRIALS // 2:
            await store.js.publish(subject_for(store.namespace, "trial/99"), b"\xff no envelope")
    assert await gateway.projector.catch_up()
    return (("authorization", f"Bearer {token}"),)


async def answered(
    stub: api_pb2_grpc.DeterminedStub, who: Metadata, request: api_pb2.GetEventsRequest
) -> list[tuple[int, str, str]]:
    return [
        (event.sequence, event.type, event.summary)
        async for response in stub.GetEvents(request, metadata=who)
        for event in response.events
    ]


@pytest.mark.parametrize(
    "shape",
    [
        {},
        {"limit": 4},
        {"limit": 4, "tail": True},
        {"since": True},
        {"from_sequence": 40},
        {"types": [STOP, "UserSessionStarted"]},
    ],
    ids=["all", "limit", "tail", "since", "from-sequence", "two-types"],
)
async def test_a_type_query_answers_what_the_scan_answers(
    stub: api_pb2_grpc.DeterminedStub,
    admin: Metadata,
    store: EventStore,
    monkeypatch: pytest.MonkeyPatch,
    shape: dict[str, object],
) -> None:
    types = cast(list[str], shape.get("types", [STOP]))
    event_filter = api_pb2.EventFilter(types=types, from_sequence=cast(int, shape.get("from_sequence", 0)))
    if shape.get("since"):
        [middle] = await store.events_at([TRIALS * 2])
        event_filter.since_ns = middle.envelope.occurred_at_ns
    request = api_pb2.GetEventsRequest(
        filter=event_filter, limit=cast(int, shape.get("limit", 0)), tail=bool(shape.get("tail"))
    )
    indexed = await answered(stub, admin, request)
    monkeypatch.setattr(type_index, "uses_index", lambda types, aggregates: False)
    assert indexed == await answered(stub, admin, request)
    assert {event_type for _, event_type, _ in indexed} == {EVENT_TYPES[name] for name in types}


class _Behind(EventScopeQueries):
    """The queries of a gateway whose projector has applied the log up to `through` only."""

    def __init__(self, pool: asyncpg.Pool, through: int) -> None:
        super().__init__(pool)
        self.through = through

    async def indexed_through(self) -> int:
        return self.through


async def _stops(store: EventStore, reading: AsyncGenerator[list[Raw], None]) -> tuple[list[int], bool]:
    """The sequences of the stop requests read, and whether the last event read was caught up."""
    async with contextlib.aclosing(reading) as batches:
        read = [raw async for batch in batches for raw in batch]
    stops = [raw[0] for raw in read if store.stored_event(raw).envelope.HasField("trial_stop_requested")]
    return stops, read[-1][2]


async def test_what_the_projector_has_not_applied_is_read_from_the_log(
    gateway: Gateway, store: EventStore, admin: Metadata
) -> None:
    scan = cast(AsyncGenerator[list[Raw], None], store.read_stored(3, ["trial"]))
    stops, _ = await _stops(store, scan)
    end = await store.last_sequence_of(["trial"])
    for through in (0, 2, stops[len(stops) // 2], end, end + 100):
        behind = _Behind(gateway.pool, through)
        reading = read_typed(store, behind, frozenset({"trial_stop_requested"}), ["trial"], 3, follow=False)
        assert await _stops(store, reading) == (stops, True), f"indexed through {through}"


async def test_following_by_type_gets_the_stored_then_the_new(
    stub: api_pb2_grpc.DeterminedStub, store: EventStore, admin: Metadata
) -> None:
    request = api_pb2.GetEventsRequest(
        filter=api_pb2.EventFilter(types=[STOP]), follow=True, tail=True, limit=2
    )
    call = stub.GetEvents(request, metadata=admin)
    first = await asyncio.wait_for(call.read(), 60)
    assert [e.aggregate for e in first.events] == ["trial/28", "trial/29"]  # trial 30's was not cut
    progress = ev.TrialProgressReported(trial_id=7, experiment_id=1, progress=0.9)
    await store.append(Append("trial/7", progress, "p-7-late"), actor="trial")
    stop = ev.TrialStopRequested(trial_id=7, experiment_id=1, reason="late cut")
    await store.append(Append("trial/7", stop, "stop-7-late"), actor="service:searcher")
    second = await asyncio.wait_for(call.read(), 60)
    assert [(e.aggregate, e.type) for e in second.events] == [("trial/7", "trial_stop_requested")]
    call.cancel()
