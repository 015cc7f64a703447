"""Reading the events of some types through the index by type
(type_index.py), where the scan would read every event of their kinds: the
sequences come from the index, a page at a time, and the events from the log
at those sequences (EventStore.raw_at: direct gets, a page asked at once).

The index holds what the projector has applied; the events stored after
that (the projector behind the log), and with `follow` every new one, are
read from the log as without the index. What it gives is what
`EventStore.read_stored` gives for the same read: lists of undecoded events
in log order, caught_up on the last stored one, so the filter after it
(service.py) does not know which way they came.
"""

import contextlib
from collections.abc import AsyncGenerator
from typing import cast

from services.common.eventstore import EventStore, Raw
from services.gateway.features.events.queries import EventScopeQueries

# The sequences asked of the index at once, and so the events asked of the log at once.
PAGE = 1_000


async def read_typed(
    store: EventStore,
    queries: EventScopeQueries,
    types: frozenset[str],
    kinds: list[str],
    start: int,
    follow: bool,
) -> AsyncGenerator[list[Raw], None]:
    """The events of `types` (all of them indexed; `kinds`: their aggregate
    kinds) from sequence `start`: through the index up to what the projector
    has applied, then from the log."""
    end = await store.last_sequence_of(kinds)
    bound = min(await queries.indexed_through(), end)
    held: list[Raw] = []
    pages = _indexed(store, queries, sorted(types), start - 1, bound)
    async with contextlib.aclosing(pages) as indexed:
        async for page in indexed:
            if held:
                yield held
            held = page
    if held:
        sequence, data, _, subject = held[-1]
        held[-1] = (sequence, data, bound == end, subject)
        yield held
    rest = cast(AsyncGenerator[list[Raw], None], store.read_stored(max(start, bound + 1), kinds, follow))
    async with contextlib.aclosing(rest) as read:
        async for batch in read:
            yield batch


async def _indexed(
    store: EventStore, queries: EventScopeQueries, types: list[str], after: int, through: int
) -> AsyncGenerator[list[Raw], None]:
    """The events the index holds of `types` after `after`, up to `through`, a page at a time."""
    while after < through:
        sequences = await queries.typed_sequences(types, after, through, PAGE)
        if not sequences:
            return
        after = sequences[-1]
        if page := await store.raw_at(sequences):
            yield page
