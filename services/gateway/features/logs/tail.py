"""The last K lines of a trial's logs, without reading the batches before them.

A trial's batches are interleaved with other trials' in the LOGS stream. The
start of its last B batches is found by a binary search over the stream's
sequences, each step one direct get that nats-server answers from its index
of subjects with how many batches of the trial it holds from there
(`StreamReader.first_from`): some twenty gets for a stream of a million
batches. Only those B batches are read; when their kept lines are fewer than
K (filters, short batches), B grows from what they held, until K lines or the
trial's first batch.
"""

import math
from collections.abc import AsyncIterator, Callable

from determined.proto import api_pb2
from services.common.eventstore import EventStore
from services.common.trial_logs import StoredLogBatch
from services.gateway.features.logs import filters

# The first read asks for this many batches when the lines per batch are not known yet.
FIRST_BATCHES = 2
Kept = Callable[[StoredLogBatch], list[api_pb2.TrialLogsResponse]]
StoredFrom = Callable[[int], AsyncIterator[StoredLogBatch]]


async def last_lines(
    store: EventStore, subject: str, count: int, kept: Kept, stored_from: StoredFrom
) -> tuple[list[api_pb2.TrialLogsResponse], int]:
    """(the last `count` lines `kept` keeps, the sequence after the last
    batch read: where following goes on). `stored_from(sequence)` reads the
    batches stored now from that sequence."""
    first, total = await store.reader.first_from(store.logs.stream, subject, 1)
    if total == 0:
        return [], 1
    wanted = min(total, FIRST_BATCHES)
    while True:
        start = first if wanted == total else await start_of_last(store, subject, wanted, first)
        responses: list[api_pb2.TrialLogsResponse] = []
        after = start
        async for stored in stored_from(start):
            responses += kept(stored)
            after = stored.sequence + 1
        found = sum(len(response.lines) for response in responses)
        if found >= count or wanted >= total:
            return filters.last_lines(responses, count), after
        wanted = min(total, _more(wanted, found, count))


def _more(read: int, found: int, count: int) -> int:
    """How many batches to read next: enough at the rate seen (with a margin), at least twice as many."""
    if found == 0:
        return read * 4
    return max(read * 2, math.ceil(read * count / found * 1.25))


async def start_of_last(store: EventStore, subject: str, batches: int, low: int) -> int:
    """The sequence of the subject's `batches`-th last batch (`low`: its first
    one's; the subject holds more than `batches`)."""
    high = await store.reader.last_sequence_of(store.logs.stream, [subject])
    # From `low` the subject holds at least `batches`; from `high` + 1, fewer.
    while low < high:
        middle = (low + high + 1) // 2
        found, held = await store.reader.first_from(store.logs.stream, subject, middle)
        if held >= batches:
            low = found
        else:
            high = middle - 1
    return low
