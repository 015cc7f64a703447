"""Where an answer "as it was" stands in the log (AsOf: a sequence, or a time).

A sequence S is the log up to and with event S. A time T is the log up to the
event before the first one that occurred after T: the cluster as the live
read models showed it at T. Each writer stamps an event with its own clock
when it appends it, so the times follow the sequence up to the skew between
the writers' clocks (services and agents on other machines): the point is
found by bisection over the sequence as if they followed it exactly, and
is a sequence S whose event occurred at or before T while event S + 1
occurred after T. With clocks that agree, no event folded occurred after T.
A prefix of the log, never the events of a time range, is folded: it is a
state the cluster was in (an event is never folded without the ones before
it that it answers).
"""

import contextlib
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from typing import cast

from determined.proto import api_pb2
from services.common.eventlog import EventLog, StoredEvent
from services.gateway.errors import InvalidArgumentError


@dataclass(frozen=True)
class Point:
    # The last event folded (0: none).
    sequence: int
    # The time asked for, or the time of event `sequence` when a sequence was.
    time_ns: int

    def message(self) -> api_pb2.AsOf:
        return api_pb2.AsOf(sequence=self.sequence, time_ns=self.time_ns)


def asked(as_of: api_pb2.AsOf) -> bool:
    """Whether a request asks for the cluster as it was (both 0: as it is)."""
    return bool(as_of.sequence or as_of.time_ns)


def check(as_of: api_pb2.AsOf, last_sequence: int) -> None:
    """InvalidArgumentError unless `as_of` names one point of a log that ends at `last_sequence`."""
    if as_of.sequence and as_of.time_ns:
        raise InvalidArgumentError("as of a sequence or a time, not both")
    if as_of.sequence < 0 or as_of.time_ns < 0:
        raise InvalidArgumentError("as of a sequence or a time: neither is below 0")
    if as_of.sequence > last_sequence:
        raise InvalidArgumentError(
            f"sequence {as_of.sequence} is past the end of the event log (sequence {last_sequence})"
        )


async def first_after(occurred: Callable[[int], Awaitable[int]], time_ns: int, last_sequence: int) -> int:
    """By bisection over 1..last_sequence, a sequence whose event (its time
    given by `occurred`) occurred after `time_ns` while the one before did
    not (or 1, or last_sequence + 1 when none did): the first such one when
    the times follow the sequence."""
    low, high = 1, last_sequence + 1
    while low < high:
        middle = (low + high) // 2
        if await occurred(middle) > time_ns:
            high = middle
        else:
            low = middle + 1
    return low


async def first_event(
    log: EventLog, start_sequence: int = 1, aggregates: list[str] | None = None
) -> StoredEvent | None:
    """The first stored event from `start_sequence` on (of `aggregates`, when
    given: read through their subjects); None when there is none: the event
    at `start_sequence`, or the first event of an aggregate."""
    reading = cast(
        AsyncGenerator[StoredEvent, None],
        log.read(None, start_sequence=start_sequence, follow=False, aggregates=aggregates),
    )
    async with contextlib.aclosing(reading) as events:
        async for stored in events:
            return stored
    return None


async def point_of(log: EventLog, as_of: api_pb2.AsOf) -> Point:
    """The point `as_of` names in `log` (InvalidArgumentError when none)."""
    last = await log.last_sequence()
    check(as_of, last)
    if as_of.sequence:
        return Point(as_of.sequence, await _occurred(log, as_of.sequence))
    return Point(await first_after(lambda s: _occurred(log, s), as_of.time_ns, last) - 1, as_of.time_ns)


async def _occurred(log: EventLog, sequence: int) -> int:
    """When event `sequence` occurred (0 for one that cannot be read)."""
    stored = await first_event(log, sequence)
    return stored.envelope.occurred_at_ns if stored is not None else 0
