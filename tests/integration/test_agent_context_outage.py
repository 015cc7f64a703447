"""The agent fetches an allocation's context across an outage of nats-server (its
own, killed and started again on the same store and port): it waits, says so once,
and goes on; past its wait it fails the allocation saying why."""

import asyncio
import os
import time
from collections.abc import Callable
from typing import Any

import pytest
import structlog
from support.own_nats import OwnNats

from services.agent.context_fetch import NOTICE_S, ContextUnavailableError, fetch_context
from services.common.connection import REQUEST_TIMEOUT_S
from services.common.eventstore import EventStore

CONTEXT = os.urandom(3 * 1024 * 1024)
# Longer than one request waits for its answer: a fetch that does not wait for nats-server
# to come back times out meanwhile (and failed the allocation).
OUTAGE_S = REQUEST_TIMEOUT_S + 2


async def until(condition: Callable[[], bool], what: str) -> None:
    end = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < end, f"{what}: not before the deadline"
        await asyncio.sleep(0.02)


async def stored_then_down(own_nats: OwnNats, namespace: str) -> tuple[EventStore, str]:
    """A store holding CONTEXT, whose nats-server was then killed (and noticed)."""
    store = await EventStore.connect(own_nats.url, namespace)
    digest = await store.contexts.put(CONTEXT)
    own_nats.kill()
    await until(lambda: not store.connection.nc.is_connected, "the client to notice the outage")
    return store, digest


def said(logs: list[dict[str, Any]], event: str) -> bool:
    return any(entry["event"] == event for entry in logs)


async def test_a_context_fetch_waits_out_an_outage_and_goes_on(own_nats: OwnNats, namespace: str) -> None:
    store, digest = await stored_then_down(own_nats, namespace)
    try:
        with structlog.testing.capture_logs() as logs:
            fetching = asyncio.create_task(
                fetch_context(store.contexts, store.connection, digest, allocation_id="1.1")
            )
            await until(lambda: said(logs, "allocation_context_waiting"), "the agent to say it waits")
            await asyncio.sleep(OUTAGE_S)
            assert not fetching.done()
            own_nats.start()
            assert await asyncio.wait_for(fetching, 60) == CONTEXT
        assert said(logs, "allocation_context_fetched")
    finally:
        await store.close()


async def test_a_context_fetch_waits_no_longer_than_its_limit(own_nats: OwnNats, namespace: str) -> None:
    store, digest = await stored_then_down(own_nats, namespace)
    try:
        fetching = fetch_context(
            store.contexts, store.connection, digest, allocation_id="1.1", wait_s=NOTICE_S
        )
        with pytest.raises(ContextUnavailableError, match="nats-server stayed unreachable for 1 s"):
            await asyncio.wait_for(fetching, 30)
    finally:
        own_nats.start()
        await store.close()
