"""The scheduler's liveness monitor against a real nats-server: an agent run
that stops sending heartbeats is lost, and its allocation with it; one that
registers again counts again; the monitor's own NATS outage loses no one."""

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from support.own_nats import OwnNats

from determined.proto import events_pb2 as ev
from services.common.envelope import Append, Envelope
from services.common.eventstore import EventStore
from services.common.heartbeats import send_heartbeats
from services.scheduler.__main__ import SchedulerSettings
from services.scheduler.__main__ import run as run_scheduler

LOST_S = 2.0
HEARTBEAT_S = 0.2
OUTAGE_LOST_S = 4.0
DEADLINE_S = 20.0


@asynccontextmanager
async def scheduler(
    nats_url: str, namespace: str, ready_file: Path, lost_s: float = LOST_S
) -> AsyncIterator[None]:
    """The scheduler service, started and caught up."""
    settings = SchedulerSettings(
        nats_url=nats_url, namespace=namespace, agent_lost_s=lost_s, ready_file=ready_file
    )
    task = asyncio.create_task(run_scheduler(settings))
    try:
        await until(lambda: _true(ready_file.exists()), "the scheduler is ready")
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


@asynccontextmanager
async def heartbeats(store: EventStore, agent_id: str, registration: str) -> AsyncIterator[None]:
    task = asyncio.create_task(
        send_heartbeats(store.nc, store.namespace, agent_id, registration, HEARTBEAT_S)
    )
    try:
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def register(store: EventStore, agent_id: str, boot_id: str, slots: int = 1) -> str:
    """Registers one run of an agent; its registration event id."""
    event = ev.AgentRegistered(
        agent_id=agent_id, hostname=agent_id, slots=[ev.Slot(slot_id=i, type="cpu") for i in range(slots)]
    )
    _, envelope = await store.append(
        Append(f"agent/{agent_id}", event, f"agent-registered-{agent_id}-{boot_id}"), actor="service:agent"
    )
    return envelope.event_id


def requested(allocation_id: str, trial_id: int) -> Append:
    event = ev.AllocationRequested(
        allocation_id=allocation_id,
        task_id=str(trial_id),
        task_type="TRIAL",
        slots=1,
        job_id="experiment/1",
        weight=1.0,
        preemptible=True,
        owner="alice",
        trial=ev.TrialLaunch(experiment_id=1, trial_id=trial_id, trial_run_id=1),
    )
    return Append(f"allocation/{allocation_id}", event, f"allocation-requested-{allocation_id}")


async def events(store: EventStore, kind: str, event_type: str) -> list[Envelope]:
    return [
        s.envelope
        async for s in store.read([kind], follow=False)
        if s.envelope.WhichOneof("payload") == event_type
    ]


async def until(condition: Callable[[], Awaitable[bool]], what: str, deadline_s: float = DEADLINE_S) -> None:
    end = time.monotonic() + deadline_s
    while not await condition():
        assert time.monotonic() < end, f"{what}: not before the deadline"
        await asyncio.sleep(0.05)


async def _true(value: bool) -> bool:
    return value


async def test_an_agent_that_stops_its_heartbeats_is_lost_with_its_allocation(
    event_store: EventStore, nats_url: str, namespace: str, tmp_path: Path
) -> None:
    async with scheduler(nats_url, namespace, tmp_path / "ready"):
        registration = await register(event_store, "agent-1", "boot-1")
        async with heartbeats(event_store, "agent-1", registration):
            await event_store.append(requested("7.1", 7), actor="service:searcher")
            await until(
                lambda: _some(events(event_store, "allocation", "allocation_assigned")),
                "the allocation is assigned",
            )
            await asyncio.sleep(2 * LOST_S)  # alive all along: heard every HEARTBEAT_S
            assert await events(event_store, "agent", "agent_lost") == []
        stopped_at_ns = time.time_ns()
        await until(lambda: _some(events(event_store, "agent", "agent_lost")), "the agent is lost")
        await until(
            lambda: _some(events(event_store, "allocation", "allocation_exited")),
            "the allocation ends as agent lost",
        )
    [lost] = await events(event_store, "agent", "agent_lost")
    assert lost.event_id == f"agent-lost-{registration}"
    assert (lost.agent_lost.agent_id, lost.agent_lost.registration_event_id) == ("agent-1", registration)
    assert 0 < lost.agent_lost.last_heartbeat_ns <= stopped_at_ns
    assert lost.agent_lost.reason.startswith("no heartbeat for ")
    [exited] = await events(event_store, "allocation", "allocation_exited")
    assert exited.event_id == "allocation-exited-7.1"
    assert (exited.allocation_exited.agent_lost, exited.allocation_exited.exit_code) == (True, -1)
    assert exited.causation_id == lost.event_id


async def test_an_agent_registered_again_counts_again_until_it_falls_silent(
    event_store: EventStore, nats_url: str, namespace: str, tmp_path: Path
) -> None:
    async with scheduler(nats_url, namespace, tmp_path / "ready"):
        first = await register(event_store, "agent-1", "boot-1")  # never heard from
        await until(lambda: _some(events(event_store, "agent", "agent_lost")), "the silent agent is lost")
        second = await register(event_store, "agent-1", "boot-2")
        async with heartbeats(event_store, "agent-1", second):
            await asyncio.sleep(2 * LOST_S)
            assert [e.event_id for e in await events(event_store, "agent", "agent_lost")] == [
                f"agent-lost-{first}"
            ]
        await until(lambda: _count(events(event_store, "agent", "agent_lost"), 2), "the second run is lost")
    assert [e.event_id for e in await events(event_store, "agent", "agent_lost")] == [
        f"agent-lost-{first}",
        f"agent-lost-{second}",
    ]


async def test_an_outage_of_nats_server_loses_no_agent(
    own_nats: OwnNats, namespace: str, tmp_path: Path
) -> None:
    store = await EventStore.connect(own_nats.url, namespace)
    try:
        # The agent's connection may come back up to connection.MAX_RETRY_S
        # after the scheduler's: a timeout well above it.
        async with scheduler(own_nats.url, namespace, tmp_path / "ready", lost_s=OUTAGE_LOST_S):
            registration = await register(store, "agent-1", "boot-1")
            async with heartbeats(store, "agent-1", registration):
                await asyncio.sleep(1.0)
                own_nats.kill()
                await asyncio.sleep(2 * OUTAGE_LOST_S)  # no heartbeat reaches anyone
                own_nats.start()
                await until(lambda: _true(store.nc.is_connected), "reconnected")
                await asyncio.sleep(OUTAGE_LOST_S + 1.0)
                assert await events(store, "agent", "agent_lost") == []
            await until(lambda: _some(events(store, "agent", "agent_lost")), "lost once it stops")
    finally:
        await store.close()


async def _some(found: Awaitable[list[Envelope]]) -> bool:
    return bool(await found)


async def _count(found: Awaitable[list[Envelope]], expected: int) -> bool:
    return len(await found) >= expected
