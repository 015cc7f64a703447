"""The projector: applies the event log to the read models, in stream order.

A reader task follows the log with an ordered push consumer from the stored
position + 1 and fills a bounded queue; the applier takes whatever has
arrived (up to BATCH_SIZE events, at least one) and applies it in ONE
transaction that also stores the last applied sequence. Events at or below
the stored sequence are skipped (read under a row lock, so two gateways'
projectors never apply an event twice), which makes a crash between commit
and anything else harmless.

Long polls (WatchAllocation) wait on the aggregates they care about
(`watching`): after each batch is committed, the projector wakes those whose
aggregates the batch's events changed (`projection.watched`), so an answer
leaves as soon as the rows say so, without polling PostgreSQL. It wakes them
for every batch it read, also when another gateway's projector stored it.
"""

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Collection, Iterator, Sequence
from typing import cast

import asyncpg
import structlog

from services.common.eventstore import EventStore, StoredEvent
from services.gateway import projection
from services.gateway.tables import SCHEMA

BATCH_SIZE = 1000
QUEUE_SIZE = 10 * BATCH_SIZE
NAME = "read_model"

log = structlog.get_logger()


class Projector:
    def __init__(self, store: EventStore, pool: asyncpg.Pool, name: str = NAME) -> None:
        self.store = store
        self.pool = pool
        self.name = name
        self.position = 0
        self._advanced = asyncio.Condition()
        # Aggregate ("allocation/12.1", "trial/12") -> the waiters to wake.
        self._watchers: dict[str, set[asyncio.Event]] = {}

    async def run(self, follow: bool = True) -> None:
        """Applies the log from the stored position; with follow=False it
        returns once it has applied what was stored when it started."""
        self.position = await load_position(self.pool, self.name)
        end = None if follow else await self.store.last_sequence()
        if end is not None and end <= self.position:
            return
        queue: asyncio.Queue[StoredEvent | None] = asyncio.Queue(QUEUE_SIZE)
        reader = asyncio.create_task(self._read(queue, end))
        try:
            await self._apply_from(queue)
        finally:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)

    async def wait_for(self, sequence: int, timeout_s: float = 10.0) -> bool:
        """Waits until every event up to `sequence` is applied."""
        async with self._advanced:
            try:
                await asyncio.wait_for(self._advanced.wait_for(lambda: self.position >= sequence), timeout_s)
            except TimeoutError:
                return False
        return True

    async def catch_up(self, timeout_s: float = 10.0) -> bool:
        """Waits until the read models hold every event stored right now."""
        return await self.wait_for(await self.store.last_sequence(), timeout_s)

    @contextlib.contextmanager
    def watching(self, aggregates: Collection[str]) -> Iterator[asyncio.Event]:
        """An event set whenever a batch that changed one of `aggregates` has
        been stored (the waiter clears it). Enter before reading the rows, so
        that no change between the read and the wait goes unnoticed."""
        changed = asyncio.Event()
        for name in aggregates:
            self._watchers.setdefault(name, set()).add(changed)
        try:
            yield changed
        finally:
            for name in aggregates:
                waiting = self._watchers.get(name, set())
                waiting.discard(changed)
                if not waiting:
                    self._watchers.pop(name, None)

    async def _read(self, queue: asyncio.Queue[StoredEvent | None], end: int | None) -> None:
        """Queues events from the position on; None after `end` (if given).

        It follows even when it stops at `end`: the store's non-following read
        may stop before the first message when that is already delivered."""
        reading = cast(AsyncGenerator[StoredEvent, None], self.store.read(None, start_sequence=self.position + 1))
        async with contextlib.aclosing(reading) as events:
            async for stored in events:
                await queue.put(stored)
                if end is not None and stored.sequence >= end:
                    await queue.put(None)
                    return

    async def _apply_from(self, queue: asyncio.Queue[StoredEvent | None]) -> None:
        while True:
            batch = [await queue.get()]
            while len(batch) < BATCH_SIZE and not queue.empty():
                batch.append(queue.get_nowait())
            events = [stored for stored in batch if stored is not None]
            if events:
                await self.apply(events)
            if len(events) < len(batch):
                return

    async def apply(self, events: Sequence[StoredEvent]) -> None:
        """Applies one batch of stored events in one transaction."""
        async with self.pool.acquire() as connection, connection.transaction():
            position = await _locked_position(connection, self.name)
            fresh = [stored for stored in events if stored.sequence > position]
            if fresh:
                await execute_plan(connection, projection.plan_batch(s.envelope for s in fresh))
                position = max(stored.sequence for stored in fresh)
                await _store_position(connection, self.name, position)
        log.debug("projected", events=len(events), applied=len(fresh), sequence=position)
        async with self._advanced:
            self.position = max(self.position, position)
            self._advanced.notify_all()
        if self._watchers:
            self._wake(projection.watched(stored.envelope for stored in events))

    def _wake(self, aggregates: set[str]) -> None:
        for name in aggregates:
            for changed in self._watchers.get(name, ()):
                changed.set()


async def execute_plan(connection: asyncpg.Connection, plan: projection.Plan) -> None:
    """Runs a plan's statements in order, each run of one statement as one
    executemany, then the batch's metric points as one upsert."""
    run: list[projection.Args] = []
    for index, (sql, args) in enumerate(plan.statements):
        run.append(args)
        following = plan.statements[index + 1][0] if index + 1 < len(plan.statements) else None
        if following != sql:
            await connection.executemany(sql, run)
            run = []
    if plan.metric_rows:
        await connection.execute(projection.METRICS_UPSERT, *plan.metric_columns())
    if plan.total_batches:
        await connection.executemany(projection.TRIAL_TOTAL_BATCHES, sorted(plan.total_batches.items()))


async def load_position(pool: asyncpg.Pool, name: str = NAME) -> int:
    sequence = await pool.fetchval(f"SELECT sequence FROM {SCHEMA}.projection_position WHERE name = $1", name)
    return int(sequence or 0)


async def _locked_position(connection: asyncpg.Connection, name: str) -> int:
    await connection.execute(
        f"INSERT INTO {SCHEMA}.projection_position (name, sequence) VALUES ($1, 0)"
        " ON CONFLICT (name) DO NOTHING",
        name,
    )
    sequence = await connection.fetchval(
        f"SELECT sequence FROM {SCHEMA}.projection_position WHERE name = $1 FOR UPDATE", name
    )
    return int(sequence)


async def _store_position(connection: asyncpg.Connection, name: str, sequence: int) -> None:
    await connection.execute(
        f"UPDATE {SCHEMA}.projection_position SET sequence = $2 WHERE name = $1", name, sequence
    )
