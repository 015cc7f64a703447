"""The projector: applies the event log to the read models, in stream order.

A reader task follows the log from the stored position + 1 and queues what
arrives, in lists; a planner takes whatever has arrived (up to `batch_size`
events, at least one) and plans it (projection.py: pure), and the applier
applies each plan in ONE transaction that also stores the last applied
sequence (the rows a batch touches are loaded, folded and written back
whole, one statement per table) while the next batch is planned. A long
stretch of stored events (a rebuild; a gateway far behind the log) is read
and planned by a helper process instead (replay.py), on another core, when
the log is nats-server's (the projector is typed on the EventLog protocol).
Events at or below the stored sequence are skipped (read under a row lock,
so two gateways' projectors never apply an event twice), which makes a crash
between commit and anything else harmless.

PostgreSQL outages are waited out: the projector logs one line when
PostgreSQL goes away and one when it is back, tries again with backoff in
between (RETRY_FIRST_S doubling to RETRY_MAX_S), and goes on from the stored
position (creating the read models first if they are not there: a gateway may
start while PostgreSQL is down). While it is down, `wait_for` and `catch_up`
raise ReadModelsUnavailableError at once, so that no request waits on a
projector that cannot move.

Long polls (WatchAllocation) wait on the aggregates they care about
(`watching`): after each batch is committed, the projector wakes those whose
aggregates the batch's events changed (`watched.watched`), so an answer
leaves as soon as the rows say so, without polling PostgreSQL. It wakes them
for every batch it read, also when another gateway's projector stored it; a
batch the replay helper planned wakes every waiter.

An event it cannot apply never stops it: one the store cannot read arrives
as an empty envelope (it applies nothing); one the projection raises on
while planning, or whose rows PostgreSQL refuses (EVENT_ERRORS: a value out
of range, a NUL in a text, a string too long for an index), is skipped: the
batch is applied again event by event, each in its own transaction, and the
one that fails is recorded in the store's skips (logged once, counted) with
the position stored past it. `progress()` says how far the projector is
behind the log and whether it is stuck (behind and not moving for STUCK_S):
the gateway's /health shows it, and `report_progress` writes it into the
gateway's report file every REPORT_EVERY_S for `det deploy local status`.
"""

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Collection, Iterator, Sequence
from typing import cast

import asyncpg
import structlog

from services.common.connection import NatsUnavailableError
from services.common.envelope import subject_for
from services.common.eventlog import EventLog, StoredEvent
from services.common.eventstore import EventStore
from services.gateway import projection, replay, watched
from services.gateway.errors import READ_MODELS_UNAVAILABLE, ReadModelsUnavailableError
from services.gateway.features.events import type_index
from services.gateway.plan import Plan, PlannedBatch, Row
from services.gateway.planning import EVENT_ERRORS, described, planned_readable
from services.gateway.read_models import POSTGRES_DOWN, SCHEMA, transaction
from services.gateway.schema import ensure_schema

BATCH_SIZE = 5000
# Lists of events (each at most the store's READ_BUFFER) read ahead of the applier.
QUEUE_LISTS = 4
NAME = "read_model"
RETRY_FIRST_S = 0.1
RETRY_MAX_S = 2.0
# Behind the log and not moving for this long: stuck (shown by /health and status).
STUCK_S = 30.0
# How often the report file (skips.py) is rewritten with the projector's progress.
REPORT_EVERY_S = 5.0

log = structlog.get_logger()

Queued = list[StoredEvent] | None


class Projector:
    def __init__(
        self,
        store: EventLog,
        pool: asyncpg.Pool,
        name: str = NAME,
        batch_size: int = BATCH_SIZE,
        helper_min_events: int = replay.HELPER_MIN_EVENTS,
        index_types: bool = True,
    ) -> None:
        self.store = store
        self.pool = pool
        self.name = name
        self.batch_size = batch_size
        # A stretch of the log at least this long is replayed with a helper process (replay.py).
        self.helper_min_events = helper_min_events
        # Whether it writes the index by event type (features/events/type_index.py): a
        # fold of the log's past into a scratch (as_of_schema.py) never reads it.
        self.index_types = index_types
        self.position = 0
        # Whether `position` was read from PostgreSQL (it is 0 until then).
        self.loaded = False
        # False while PostgreSQL is down (from the first failure to the next success).
        self.available = True
        self._down_since = 0.0
        self._back = asyncio.Event()
        self._back.set()
        self._advanced = asyncio.Condition()
        # Aggregate ("allocation/12.1", "trial/12") -> the waiters to wake.
        self._watchers: dict[str, set[asyncio.Event]] = {}
        # When the position last moved, and since when it is known to be behind the log.
        self._moved_at = time.monotonic()
        self._behind_since: float | None = None
        self._log_last = 0
        # Called with each batch of events it read once applied (the gateway's /metrics
        # observes trials' start phases: features/monitoring/phases.py); must not raise.
        # Not called for a stretch the replay helper planned (a start far behind the log).
        self.observers: list[Callable[[Sequence[StoredEvent]], None]] = []

    async def run(self, follow: bool = True, until: int | None = None) -> None:
        """Applies the log from the stored position; with follow=False it
        returns once it has applied what was stored when it started (or up to
        `until`, a sequence stored already: the read models as they were
        then). Waits out PostgreSQL outages (see the module's docstring).
        While it follows, it reports its progress (`report_progress`)."""
        reporter = asyncio.create_task(self.report_progress(), name="projector-report") if follow else None
        try:
            await self._run_waiting_out_outages(follow, until)
        finally:
            if reporter is not None:
                await _stopped(reporter)

    async def _run_waiting_out_outages(self, follow: bool, until: int | None) -> None:
        delay = RETRY_FIRST_S
        while True:
            try:
                await self._run_from_stored_position(follow, until)
                return
            except POSTGRES_DOWN as error:
                if self.available:
                    self._down_since, delay = time.monotonic(), RETRY_FIRST_S
                    log.warning(
                        "read_models_unavailable", error=described(error), retrying_every_s=RETRY_MAX_S
                    )
                    await self._set_available(False)
            await asyncio.sleep(delay)
            delay = min(2 * delay, RETRY_MAX_S)

    async def _run_from_stored_position(self, follow: bool, until: int | None) -> None:
        async with self.pool.acquire() as connection:  # PostgreSQL may have come up empty
            if await ensure_schema(connection):
                log.info("read_models_outdated", action="dropped; replaying the log from sequence 1")
        async with self._advanced:  # a waiter may already be satisfied by the stored position
            self.position = await load_position(self.pool, self.name)
            self.loaded = True
            self._advanced.notify_all()
        if not self.available:
            log.info("read_models_available", down_s=round(time.monotonic() - self._down_since, 1))
            await self._set_available(True)
        end = None if follow else until if until is not None else await self.store.last_sequence()
        if end is not None and end <= self.position:
            return
        stored = end if end is not None else await self.store.last_sequence()
        if isinstance(self.store, EventStore) and stored - self.position >= self.helper_min_events:
            await self._apply_replayed(self.store, stored)
            if end is not None and self.position >= end:
                return
        queue: asyncio.Queue[Queued] = asyncio.Queue(QUEUE_LISTS)
        reader = asyncio.create_task(self._read(queue, end))
        try:
            await self._apply_from(queue)
        finally:
            await _stopped(reader)

    async def _set_available(self, available: bool) -> None:
        self.available = available
        if available:
            self._back.set()
        else:
            self._back.clear()
        async with self._advanced:  # waiters raise at once while it is down
            self._advanced.notify_all()

    async def wait_available(self) -> None:
        """Returns once PostgreSQL answers the projector (at once if it does)."""
        await self._back.wait()

    async def wait_for(self, sequence: int, timeout_s: float = 10.0) -> bool:
        """Waits until every event up to `sequence` is applied; False after
        `timeout_s`. Raises ReadModelsUnavailableError at once while
        PostgreSQL is down: the read models cannot move, and a caller that
        went on would answer from rows that miss what it waits for."""
        async with self._advanced:
            try:
                async with asyncio.timeout(timeout_s):
                    await self._advanced.wait_for(lambda: self._applied(sequence) or not self.available)
            except TimeoutError:
                return False
        if not self._applied(sequence):
            raise ReadModelsUnavailableError(READ_MODELS_UNAVAILABLE)
        return True

    def _applied(self, sequence: int) -> bool:
        return self.loaded and self.position >= sequence

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

    async def _read(self, queue: asyncio.Queue[Queued], end: int | None) -> None:
        """Queues lists of events from the position on; None after `end` (if given).

        It follows even when it stops at `end`: the store's non-following read
        may stop before the first message when that is already delivered."""
        reading = cast(
            AsyncGenerator[list[StoredEvent], None],
            self.store.read_batches(None, start_sequence=self.position + 1),
        )
        async with contextlib.aclosing(reading) as batches:
            async for batch in batches:
                if end is not None and batch[-1].sequence >= end:
                    await queue.put([stored for stored in batch if stored.sequence <= end])
                    await queue.put(None)
                    return
                await queue.put(batch)

    async def _apply_replayed(self, store: EventStore, end: int) -> None:
        """Applies the events from the position to `end` as a helper process
        plans them (replay.py), until done or until another projector has
        applied part of a batch (the caller goes on from there)."""
        replaying = cast(
            AsyncGenerator[replay.Replayed, None],
            replay.planned(store, self.position + 1, end, self.batch_size),
        )
        async with contextlib.aclosing(replaying) as batches:
            async for batch, skipped in batches:
                if not await self._apply_planned(batch, skipped):
                    return

    async def _apply_from(self, queue: asyncio.Queue[Queued]) -> None:
        """Applies what the reader queues, at most `batch_size` events per
        transaction (whatever has arrived), until the reader's None. The next
        batch is planned (projection.plan_batch: pure CPU) while PostgreSQL
        works on this one."""
        planned: asyncio.Queue[tuple[list[StoredEvent], Plan] | None] = asyncio.Queue(1)
        planner = asyncio.create_task(self._plan_ahead(queue, planned))
        try:
            while (batch := await planned.get()) is not None:
                await self.apply(*batch)
            await planner
        finally:
            await _stopped(planner)

    async def _plan_ahead(
        self,
        queue: asyncio.Queue[Queued],
        planned: asyncio.Queue[tuple[list[StoredEvent], Plan] | None],
    ) -> None:
        events: list[StoredEvent] = []
        ended = False
        while True:
            if not events and not ended:
                queued = await queue.get()
                ended = queued is None
                events += queued or []
            while len(events) < self.batch_size and not ended and not queue.empty():
                queued = queue.get_nowait()
                ended = queued is None
                events += queued or []
            if not events:
                await planned.put(None)
                return
            batch, events = events[: self.batch_size], events[self.batch_size :]
            await planned.put((batch, self._plan(batch)))

    async def apply(self, events: Sequence[StoredEvent], plan: Plan | None = None) -> None:
        """Applies one batch of stored events in one transaction; `plan` is
        theirs when it was made ahead (made here otherwise, and again when
        some of the events turn out to be applied already). When PostgreSQL
        refuses what an event holds, the batch is applied event by event and
        that one skipped."""
        try:
            position = await self._apply_batch(events, plan)
        except EVENT_ERRORS as error:
            if len(events) > 1:
                for stored in events:
                    await self.apply([stored])
                return
            position = await self._skip_unappliable(events[0], error)
        log.debug("projected", events=len(events), sequence=position)
        woken = _watched(events) if self._watchers else set()
        await self._advance(position, woken)
        for observe in self.observers:
            observe(events)

    async def _apply_batch(self, events: Sequence[StoredEvent], plan: Plan | None) -> int:
        async with self._transaction() as connection:
            position = await _locked_position(connection, self.name)
            fresh = [stored for stored in events if stored.sequence > position]
            if fresh:
                if plan is None or len(fresh) < len(events):
                    plan = self._plan(fresh)
                await execute_plan(connection, plan)
                position = max(stored.sequence for stored in fresh)
                await _store_position(connection, self.name, position)
        return position

    async def _skip_unappliable(self, stored: StoredEvent, error: BaseException) -> int:
        """Records `stored` as skipped and stores the position past it."""
        reason = f"its rows cannot be written: {described(error)}"
        self._record_skip(stored.sequence, stored.envelope.aggregate, reason)
        async with self._transaction() as connection:
            position = await _locked_position(connection, self.name)
            if stored.sequence > position:
                position = stored.sequence
                if self.index_types:  # its rows are refused, but det events finds it by its type
                    await execute_plan(connection, Plan(event_types=type_index.rows([stored])))
                await _store_position(connection, self.name, position)
        return position

    def _plan(self, events: Sequence[StoredEvent]) -> Plan:
        """The plan of `events`; those the projection cannot plan are skipped (recorded)."""
        plan, unplannable = planned_readable(events, index_types=self.index_types)
        for index, reason in unplannable:
            self._record_skip(events[index].sequence, events[index].envelope.aggregate, reason)
        return plan

    def _record_skip(self, sequence: int, aggregate: str, reason: str) -> None:
        subject = subject_for(self.store.namespace, aggregate)
        self.store.skips.record(sequence, subject, reason, reader="projector")

    def progress(self) -> dict[str, object]:
        """How far the read models are: the applied position, the log's last
        sequence as last looked at, and a state: caught up, behind (moving),
        stuck (behind and not moving for STUCK_S), or unavailable (PostgreSQL)."""
        behind = max(0, self._log_last - self.position)
        if not self.available:
            state = "unavailable"
        elif not behind:
            state = "caught up"
        else:
            still_since = max(self._moved_at, self._behind_since or time.monotonic())
            state = "stuck" if time.monotonic() - still_since > STUCK_S else "behind"
        return {"applied": self.position, "log_last": self._log_last, "behind": behind, "state": state}

    async def look_at_log(self) -> None:
        """Notes the log's last sequence now (what `progress` compares with)."""
        self._log_last = max(self._log_last, await self.store.last_sequence())
        if self.position >= self._log_last:
            self._behind_since = None
        elif self._behind_since is None:
            self._behind_since = time.monotonic()

    async def report_progress(self) -> None:
        """Every REPORT_EVERY_S: looks at the log and rewrites the store's
        report file (skips.py) with `progress()`, until cancelled."""
        self.store.skips.extra = lambda: {"projector": self.progress()}
        while True:
            with contextlib.suppress(NatsUnavailableError, TimeoutError):
                await self.look_at_log()
            self.store.skips.write_report()
            await asyncio.sleep(REPORT_EVERY_S)

    async def _apply_planned(self, batch: PlannedBatch, skipped: list[replay.Skipped]) -> bool:
        """Applies a batch planned by the replay helper in one transaction;
        False when another projector applied part of it (the plan is then of
        no use: the events left are read again)."""
        for sequence, subject, reason, reader in skipped:
            self.store.skips.record(sequence, subject, reason, reader=reader)
        try:
            async with self._transaction() as connection:
                position = await _locked_position(connection, self.name)
                if position < batch.first:
                    await execute_plan(connection, batch.plan)
                    position = batch.last
                    await _store_position(connection, self.name, position)
        except EVENT_ERRORS as error:  # one of its events: applied again one by one
            log.info("replayed_batch_refused", first=batch.first, last=batch.last, error=described(error))
            return False
        log.debug("projected", first=batch.first, sequence=position)
        # A long replay is a start or a catch-up: few wait meanwhile, and a
        # waiter woken for nothing looks at its rows again, no more.
        await self._advance(position, set(self._watchers))
        return position >= batch.last

    @contextlib.asynccontextmanager
    async def _transaction(self) -> AsyncIterator[asyncpg.Connection]:
        async with self.pool.acquire() as connection, transaction(connection):
            yield connection

    async def _advance(self, position: int, woken: set[str]) -> None:
        """Records what is applied, and wakes those waiting on it."""
        async with self._advanced:
            if position > self.position:
                self._moved_at = time.monotonic()
            self.position = max(self.position, position)
            self.loaded = True
            self._advanced.notify_all()
        if self._watchers:
            self._wake(woken)

    def _wake(self, aggregates: set[str]) -> None:
        for name in aggregates:
            for changed in self._watchers.get(name, ()):
                changed.set()


def _watched(events: Sequence[StoredEvent]) -> set[str]:
    """What these events wake; nothing for one the projection cannot read."""
    try:
        return watched.watched(stored.envelope for stored in events)
    except EVENT_ERRORS:
        return set().union(*(_watched([stored]) for stored in events)) if len(events) > 1 else set()


async def execute_plan(connection: asyncpg.Connection, plan: Plan) -> None:
    """Loads the rows the plan touches, folds it over them and writes back
    what changed, one statement per table; then the features' statements
    (the metric points: the stored ones a resumed run supersedes, and the
    batch's as one upsert)."""
    stored: dict[str, dict[object, Row]] = {}
    for table, keys in plan.keys().items():
        key = projection.key_column(table)
        records = await connection.fetch(projection.LOADS[table], keys)
        stored[table] = {record[key]: dict(record) for record in records}
    for table, rows in plan.rows(stored).items():
        if rows:
            await connection.execute(projection.UPSERTS[table], *projection.row_columns(table, rows))
    for sql, runs in projection.statements(plan):
        if len(runs) == 1:
            await connection.execute(sql, *runs[0])
        else:
            await connection.executemany(sql, runs)


async def load_position(pool: asyncpg.Pool, name: str = NAME) -> int:
    sequence = await pool.fetchval(f"SELECT sequence FROM {SCHEMA}.projection_position WHERE name = $1", name)
    return int(sequence or 0)


async def _locked_position(connection: asyncpg.Connection, name: str) -> int:
    """The stored position, its row locked until the transaction ends (so two
    projectors apply a batch one after the other)."""
    sequence = await connection.fetchval(
        f"INSERT INTO {SCHEMA}.projection_position (name, sequence) VALUES ($1, 0)"
        " ON CONFLICT (name) DO UPDATE SET name = excluded.name RETURNING sequence",
        name,
    )
    return int(sequence)


async def _store_position(connection: asyncpg.Connection, name: str, sequence: int) -> None:
    await connection.execute(
        f"UPDATE {SCHEMA}.projection_position SET sequence = $2 WHERE name = $1", name, sequence
    )


async def _stopped(task: asyncio.Task[None]) -> None:
    """Cancels `task` and waits for its end, cancelling it again while it runs
    on. A cancellation can be lost on its way: Python 3.11's asyncio.wait_for
    returns the result that arrived together with it (nats-py's requests use
    wait_for; our own waits use asyncio.timeout, which does not). The reader then went on into a full
    queue that nobody read any more, and the projector waited for it forever,
    still "available": the error that stopped the applier (PostgreSQL gone)
    never reached `run`, so it neither logged the outage nor tried again."""
    while not task.done():
        task.cancel()
        try:
            await asyncio.wait({task}, timeout=RETRY_FIRST_S)
        except asyncio.CancelledError:
            task.cancel()
            raise
    if not task.cancelled():
        task.exception()  # retrieved: the caller's own error is the one to report
