"""The cluster as it was (features/events/as_of.py) on the recorded golden
logs: at each point tried, `describe`, `list-trials` and `agent list` as of a
sequence S give exactly what the same queries give over read models rebuilt
from the log up to S (Projector.run(until=S), in a database of its own), and
the job queue as of S is the one the scheduler's own core held at S (but for
why a job waits, which the log does not record). The live read models hold
the whole log all along and are never written."""

import asyncio
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Any, cast

import asyncpg
import pytest
from support.golden_log import golden_log
from support.pg_server import new_database
from support.security_gateway import gateway_settings

from deploy.local.servers import PostgresServer
from determined.proto import api_pb2
from services.common.envelope import Envelope, subject_for
from services.common.eventstore import EventStore
from services.common.job_queue import PublishedQueue
from services.common.memory_log import MemoryEventLog
from services.gateway.auth import UserPrincipal, acting_as
from services.gateway.errors import (
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    ResourceExhaustedError,
)
from services.gateway.features.events import as_of as as_of_reads
from services.gateway.features.events.as_of import LOCK_CLASS, MAX_AT_ONCE, SCAN_WINDOW, AsOfReads
from services.gateway.features.parts import Parts, Queries
from services.gateway.features.users.directory import UserDirectory
from services.gateway.projector import Projector
from services.gateway.schema import create_schema, drop_schema
from services.scheduler.core import SchedulerCore
from services.scheduler.queue import job_queue

ADMIN = UserPrincipal("admin", user_id=1, admin=True)
# Each log, and how many points of it are tried (spread over it, its last one included).
LOGS = {"three_experiments.jsonl": 8, "adaptive_pause_kill.jsonl": 6, "generated_cluster.jsonl.gz": 3}


@dataclass
class Logged:
    name: str
    log: MemoryEventLog
    envelopes: list[Envelope]
    as_of: AsOfReads
    live: asyncpg.Pool
    rebuilt: asyncpg.Pool


@pytest.fixture
async def logged(
    request: pytest.FixtureRequest, postgres_server: PostgresServer, namespace: str, database_url: str
) -> AsyncIterator[Logged]:
    envelopes = golden_log(request.param)
    log = MemoryEventLog(namespace)
    for envelope in envelopes:
        log.publish_raw(subject_for(namespace, envelope.aggregate), envelope.SerializeToString())
    live = await asyncpg.create_pool(database_url, min_size=1, max_size=4)
    rebuilt = await asyncpg.create_pool(
        await new_database(postgres_server, f"{namespace}_rebuilt"), min_size=1, max_size=2
    )
    try:
        projector = Projector(log, live)
        await projector.run(follow=False)
        store = cast(EventStore, log)
        settings = gateway_settings("nats://127.0.0.1:1", namespace, database_url, "as-of-test")
        parts = Parts(settings, store, projector, Queries(live), UserDirectory(store))
        yield Logged(request.param, log, envelopes, AsOfReads(parts), live, rebuilt)
    finally:
        await rebuilt.close()
        await live.close()


def points(envelopes: list[Envelope], count: int) -> list[int]:
    last = len(envelopes)
    return sorted({max(1, last * n // count) for n in range(1, count + 1)})


async def described_as_of(as_of: AsOfReads, experiment_id: int, sequence: int) -> Any:
    try:
        return await as_of.experiment(
            api_pb2.GetExperimentRequest(experiment_id=experiment_id, as_of=api_pb2.AsOf(sequence=sequence))
        )
    except NotFoundError:
        return None


async def described(queries: Queries, experiment_id: int) -> Any:
    experiment = await queries.experiments.experiment(experiment_id)
    if experiment is None or experiment.state == "DELETED":
        return None
    return api_pb2.GetExperimentResponse(
        experiment=experiment, trials=await queries.trials.trials(experiment_id)
    )


@pytest.mark.parametrize(
    ("logged", "scan_window"),
    [
        ("three_experiments.jsonl", 0),
        ("adaptive_pause_kill.jsonl", SCAN_WINDOW),
        ("generated_cluster.jsonl.gz", 0),
    ],
    indirect=["logged"],
)
async def test_as_of_a_sequence_is_what_a_rebuild_stopped_there_shows(
    logged: Logged, scan_window: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An experiment's events read through its aggregates' subjects (scan window 0), or read
    from a scan of the log since its creation."""
    monkeypatch.setattr(as_of_reads, "SCAN_WINDOW", scan_window)
    experiment_ids = [e.id for e in await Queries(logged.live).experiments.experiments()]
    live_before = await _digest(logged.live)
    rebuilding = Projector(logged.log, logged.rebuilt)
    async with logged.rebuilt.acquire() as connection:
        await drop_schema(connection)
        await create_schema(connection)
    with acting_as(ADMIN):
        for sequence in points(logged.envelopes, LOGS[logged.name]):
            await rebuilding.run(follow=False, until=sequence)
            rebuilt = Queries(logged.rebuilt)
            asked = api_pb2.AsOf(sequence=sequence)
            point = api_pb2.AsOf(sequence=sequence, time_ns=logged.envelopes[sequence - 1].occurred_at_ns)
            existing = []
            for experiment_id in experiment_ids:
                expected = await described(rebuilt, experiment_id)
                answered = await described_as_of(logged.as_of, experiment_id, sequence)
                if expected is None:
                    assert answered is None, (sequence, experiment_id)
                    continue
                expected.as_of.CopyFrom(point)
                assert answered == expected, (sequence, experiment_id)
                existing.append(experiment_id)
            for experiment_id in existing[-1:]:
                trials = await logged.as_of.experiment_trials(
                    api_pb2.GetExperimentTrialsRequest(experiment_id=experiment_id, as_of=asked)
                )
                assert list(trials.trials) == await rebuilt.trials.trials(experiment_id)
            agents = await logged.as_of.agents(api_pb2.GetAgentsRequest(as_of=asked))
            assert list(agents.agents) == await rebuilt.agents.agents(), sequence
            assert agents.as_of == point
            queue, _, _ = await logged.as_of.job_queue(asked, PublishedQueue())
            assert list(queue.jobs) == scheduler_queue(logged.envelopes[:sequence]), sequence
    assert await _digest(logged.live) == live_before


def scheduler_queue(envelopes: list[Envelope]) -> list[Any]:
    """The queue the scheduler's own core holds after `envelopes`, but why jobs wait."""
    core = SchedulerCore()
    state = core.initial_state()
    for envelope in envelopes:
        state = core.evolve(state, envelope)
    return [replace(view, waiting_reason="") for view in job_queue(state, core.config)]


async def _digest(pool: asyncpg.Pool) -> list[Any]:
    """Every live row (the projector's position included), to show nothing wrote them."""
    return [
        await pool.fetchval(
            f"SELECT md5(string_agg(t::text, ',' ORDER BY t::text)) FROM read_model.{table} t"
        )
        for table in (
            "experiments",
            "trials",
            "allocations",
            "metrics",
            "checkpoints",
            "agents",
            "projection_position",
        )
    ]


@pytest.mark.parametrize("logged", ["three_experiments.jsonl"], indirect=True)
async def test_as_of_a_time_is_the_log_up_to_the_last_event_by_then(logged: Logged) -> None:
    fourth = logged.envelopes[3].occurred_at_ns
    with acting_as(ADMIN):
        for time_ns, sequence in ((fourth, 4), (fourth - 1, 3), (2**62, len(logged.envelopes))):
            response = await logged.as_of.agents(
                api_pb2.GetAgentsRequest(as_of=api_pb2.AsOf(time_ns=time_ns))
            )
            assert response.as_of == api_pb2.AsOf(sequence=sequence, time_ns=time_ns)
        before = await logged.as_of.experiment(
            api_pb2.GetExperimentRequest(experiment_id=1, as_of=api_pb2.AsOf(time_ns=fourth - 1))
        )
    assert (before.experiment.state, len(before.trials), before.trials[0].state) == ("ACTIVE", 1, "ACTIVE")


@pytest.mark.parametrize("logged", ["three_experiments.jsonl"], indirect=True)
async def test_only_its_owner_or_an_admin_reads_an_experiment_as_it_was(logged: Logged) -> None:
    request = api_pb2.GetExperimentRequest(experiment_id=1, as_of=api_pb2.AsOf(sequence=10))
    with acting_as(UserPrincipal("mallory", user_id=7)), pytest.raises(PermissionDeniedError):
        await logged.as_of.experiment(request)
    with acting_as(UserPrincipal("determined", user_id=2)):  # its owner
        assert (await logged.as_of.experiment(request)).experiment.id == 1
    with acting_as(UserPrincipal("mallory", user_id=7)):  # the cluster's agents and queue: anyone
        await logged.as_of.agents(api_pb2.GetAgentsRequest(as_of=api_pb2.AsOf(sequence=10)))
        await logged.as_of.job_queue(api_pb2.AsOf(sequence=10), PublishedQueue())


@pytest.mark.parametrize("logged", ["three_experiments.jsonl"], indirect=True)
async def test_points_outside_the_log_are_refused(logged: Logged) -> None:
    with acting_as(ADMIN):
        for as_of, message in (
            (api_pb2.AsOf(sequence=30), "sequence 30 is past the end of the event log (sequence 29)"),
            (api_pb2.AsOf(sequence=3, time_ns=5), "as of a sequence or a time, not both"),
            (api_pb2.AsOf(sequence=-1), "neither is below 0"),
        ):
            with pytest.raises(InvalidArgumentError, match=re.escape(message)):
                await logged.as_of.agents(api_pb2.GetAgentsRequest(as_of=as_of))
        with pytest.raises(NotFoundError, match="experiment 3 did not exist yet at sequence 2"):
            await logged.as_of.experiment(
                api_pb2.GetExperimentRequest(experiment_id=3, as_of=api_pb2.AsOf(sequence=2))
            )


@pytest.mark.parametrize("logged", ["three_experiments.jsonl"], indirect=True)
async def test_at_most_two_answers_are_worked_out_at_once(logged: Logged, database_url: str) -> None:
    holders = [await asyncpg.connect(database_url) for _ in range(MAX_AT_ONCE)]
    try:
        for place, holder in enumerate(holders):
            assert await holder.fetchval("SELECT pg_try_advisory_lock($1, $2)", LOCK_CLASS, place)
        with acting_as(ADMIN), pytest.raises(ResourceExhaustedError, match="try again in a moment"):
            await logged.as_of.agents(api_pb2.GetAgentsRequest(as_of=api_pb2.AsOf(sequence=5)))
        await holders[0].close()  # one place free again
        with acting_as(ADMIN):
            await logged.as_of.agents(api_pb2.GetAgentsRequest(as_of=api_pb2.AsOf(sequence=5)))
    finally:
        for holder in holders:
            await holder.close()


@pytest.mark.parametrize("logged", ["three_experiments.jsonl"], indirect=True)
async def test_an_answer_cancelled_half_way_leaves_no_scratch_behind(logged: Logged) -> None:
    async def temporary_tables() -> int:
        return int(await logged.live.fetchval("SELECT count(*) FROM pg_class WHERE relpersistence = 't'"))

    started = asyncio.Event()
    reading = logged.log.read_batches

    def slow_read(kinds: list[str] | None, *args: Any, **kwargs: Any) -> Any:
        async def batches() -> Any:  # the fold's read of agent and allocation events stalls
            async for batch in reading(kinds, *args, **kwargs):
                if kinds is not None:
                    started.set()
                    await asyncio.sleep(60)
                yield batch

        return batches()

    logged.log.read_batches = slow_read  # type: ignore[method-assign]
    with acting_as(ADMIN):
        answer = asyncio.create_task(
            logged.as_of.agents(api_pb2.GetAgentsRequest(as_of=api_pb2.AsOf(sequence=20)))
        )
        await asyncio.wait_for(started.wait(), 60)
        assert await temporary_tables() > 0
        answer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await answer
    async with asyncio.timeout(60):  # the server drops them as the connection's session ends
        while await temporary_tables():
            await asyncio.sleep(0.05)
