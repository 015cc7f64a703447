"""Waiting on an event log from a test: poll it until the events so far satisfy a condition."""

import asyncio
import time
from collections.abc import Callable

import pytest

from services.common.envelope import Envelope
from services.common.eventlog import EventLog


async def wait_for_events(
    log: EventLog, found: Callable[[list[Envelope]], bool], deadline_s: float, poll_s: float
) -> list[Envelope]:
    """Every event of the log from its start, once `found` holds of them; a test failure naming
    what the log holds at the deadline. Each poll reads only what was appended since the last
    (a poll of the whole log at 20 Hz cost a waiting test a good part of a core)."""
    deadline = time.monotonic() + deadline_s
    envelopes: list[Envelope] = []
    next_sequence = 1
    while True:
        async for stored in log.read(None, start_sequence=next_sequence, follow=False):
            envelopes.append(stored.envelope)
            next_sequence = stored.sequence + 1
        if found(envelopes):
            return envelopes
        if time.monotonic() > deadline:
            pytest.fail(f"timed out; the log holds {[e.WhichOneof('payload') for e in envelopes]}")
        await asyncio.sleep(poll_s)
