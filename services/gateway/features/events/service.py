"""The event log's functions (det events), which the gRPC servicer and the
HTTP routes call: the events that match a filter, in log order, in words.

The filter runs here, on the gateway: naming an experiment, trial,
allocation or task reads only its aggregates' subjects (scope.py); naming
only types reads only their events, through the index by type
(type_index.py: all but the per-step reports), else only the subjects of
their kinds; `since` starts at the
first event of that time (less filters.CLOCK_SLACK_NS), found by a binary
search of the log, not a scan. A user who is not an admin reads what they
own (scope.py).
"""

import collections
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import cast

from google.protobuf.message import DecodeError

from determined.proto import api_pb2
from services.common.envelope import Envelope
from services.common.eventlog import StoredEvent
from services.common.eventstore import Raw
from services.gateway.auth import require_user
from services.gateway.errors import InvalidArgumentError
from services.gateway.features.events import filters, scope, type_index
from services.gateway.features.events.filters import EventMatch
from services.gateway.features.events.typed_reading import read_typed
from services.gateway.features.events.wording import logged_event
from services.gateway.features.parts import FeatureService

# The events the HTTP answer holds at most (its `limit` when it names none).
MAX_PAGE_EVENTS = 10_000
# The newest events returned whose ids are kept to find what a later one answers.
CAUSES_KEPT = 100_000


class Events(FeatureService):
    async def get_events(self, request: api_pb2.GetEventsRequest) -> AsyncIterator[api_pb2.GetEventsResponse]:
        """The matching events in batches; with `follow`, then each new one, until the caller hangs up."""
        causes = _Causes()
        reading = self._matching(request)
        async with contextlib.aclosing(reading) as batches:
            async for batch in batches:
                yield api_pb2.GetEventsResponse(events=[causes.worded(stored) for stored in batch])

    async def events_page(self, request: api_pb2.GetEventsRequest) -> api_pb2.GetEventsResponse:
        """The matching events in one answer (HTTP): at most MAX_PAGE_EVENTS, never following."""
        page = api_pb2.GetEventsRequest()
        page.CopyFrom(request)
        page.follow = False
        page.limit = min(request.limit or MAX_PAGE_EVENTS, MAX_PAGE_EVENTS)
        answer = api_pb2.GetEventsResponse()
        async for response in self.get_events(page):
            answer.events.extend(response.events)
        return answer

    async def _matching(self, request: api_pb2.GetEventsRequest) -> AsyncGenerator[list[StoredEvent], None]:
        """The stored events that match, in lists as they are read, `limit` and `tail` applied."""
        event_filter = request.filter
        filters.checked(event_filter)
        if request.limit < 0:
            raise InvalidArgumentError(f"limit must be 0 or more, not {request.limit}")
        require_user()
        aggregates = await self._aggregates(filters.named_scopes(event_filter))
        if aggregates == []:
            return
        visibility = None if aggregates is not None else await scope.visibility(self.queries)
        match = EventMatch.of(event_filter, visibility)
        kinds = None if aggregates is not None else filters.kinds_of_types(match.types)
        start = max(event_filter.from_sequence, 1)
        if event_filter.since_ns:
            earliest = await self.store.first_sequence_at(event_filter.since_ns - filters.CLOCK_SLACK_NS)
            start = max(start, earliest)
        # Closed as soon as the caller hangs up: a read that follows holds consumers on nats-server.
        reading = self._reading(start, kinds, aggregates, match.types, request.follow)
        matching = _matched(reading, match, self.store.stored_event)
        async with contextlib.aclosing(reading), contextlib.aclosing(matching) as matched:
            limited = _tail(matched, request.limit) if request.tail else _head(matched, request.limit)
            async with contextlib.aclosing(limited) as batches:
                async for batch in batches:
                    yield batch

    def _reading(
        self,
        start: int,
        kinds: list[str] | None,
        aggregates: list[str] | None,
        types: frozenset[str],
        follow: bool,
    ) -> AsyncGenerator[list[Raw], None]:
        """The stored events to filter, from `start`: through the index by
        type when it holds the types named (type_index.py), else the log's."""
        if kinds is not None and type_index.uses_index(types, aggregates):
            return read_typed(self.store, self.queries.events, types, kinds, start, follow)
        return cast(AsyncGenerator[list[Raw], None], self.store.read_stored(start, kinds, follow, aggregates))

    async def _aggregates(self, named: list[tuple[str, str]]) -> list[str] | None:
        """The aggregates the caller may read of what the filter names, those
        common to all when it names several (None: it names nothing)."""
        common: list[str] | None = None
        for kind, key in named:
            await scope.check_may_read(self.queries, kind, key)
            found = await scope.aggregates_of(self.queries, kind, key)
            common = found if common is None else [name for name in common if name in set(found)]
        return common


async def _matched(
    reading: AsyncIterator[list[Raw]], match: EventMatch, checked: Callable[[Raw], StoredEvent]
) -> AsyncGenerator[tuple[list[StoredEvent], bool], None]:
    """(the events of a batch that match, whether the read had caught up with
    the log at its end); ends at the first event past `until`. Each event is
    first tried as it decodes (`_peeked`), and only one that may match is
    checked (`checked`: wellformed.py, most of its cost): most of a read by
    type is not. One envelope takes each event's first decoding in turn
    (making one costs as much as decoding into it)."""
    envelope = Envelope()
    async for batch in reading:
        kept: list[StoredEvent] = []
        for raw in batch:
            peeked = _peeked(envelope, raw[1])
            if peeked is not None and match.past_the_end(peeked):
                yield kept, True
                return
            if peeked is None or match.keeps(peeked):
                stored = checked(raw)
                if match.keeps(stored.envelope):
                    kept.append(stored)
        yield kept, batch[-1][2]


def _peeked(envelope: Envelope, data: bytes) -> Envelope | None:
    """`envelope` decoded from `data`, not yet checked; None when it does not decode."""
    try:
        envelope.ParseFromString(data)
    except DecodeError:
        return None
    return envelope


async def _head(
    matched: AsyncIterator[tuple[list[StoredEvent], bool]], limit: int
) -> AsyncGenerator[list[StoredEvent], None]:
    """The first `limit` events (0: all)."""
    given = 0
    async for kept, _ in matched:
        batch = kept[: limit - given] if limit else kept
        given += len(batch)
        if batch:
            yield batch
        if limit and given >= limit:
            return


async def _tail(
    matched: AsyncIterator[tuple[list[StoredEvent], bool]], limit: int
) -> AsyncGenerator[list[StoredEvent], None]:
    """The last `limit` events stored when the read began (0: all), then,
    following, every new one."""
    newest: collections.deque[StoredEvent] = collections.deque(maxlen=limit or None)
    caught_up = False
    async for kept, at_end in matched:
        if caught_up:
            if kept:
                yield kept
            continue
        newest.extend(kept)
        if at_end:
            caught_up = True
            if newest:
                yield list(newest)
    if not caught_up and newest:
        yield list(newest)


class _Causes:
    """The ids of the newest events returned (CAUSES_KEPT), to give each
    event the sequence of the one it answers when that was returned too."""

    def __init__(self) -> None:
        self._sequences: dict[str, int] = {}

    def worded(self, stored: StoredEvent) -> api_pb2.LoggedEvent:
        envelope = stored.envelope
        event = logged_event(stored, self._sequences.get(envelope.causation_id, 0))
        if envelope.event_id:
            self._sequences[envelope.event_id] = stored.sequence
            if len(self._sequences) > CAUSES_KEPT:
                del self._sequences[next(iter(self._sequences))]
        return event
