"""Fixtures the integration tests share beyond the servers (tests/conftest.py)."""

from collections.abc import AsyncIterator

import asyncpg
import pytest
from support.event_logs import event_log, event_logs  # noqa: F401 (both event logs, parametrised)
from support.own_nats import own_nats  # noqa: F401 (the outage tests' fixture)

from services.gateway.schema import create_schema


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[asyncpg.Pool]:
    """A connection pool on the test's own database, with the read-model schema created."""
    created = await asyncpg.create_pool(database_url, min_size=1, max_size=4)
    async with created.acquire() as connection:
        await create_schema(connection)
    yield created
    await created.close()


@pytest.fixture
def settings(nats_url: str, namespace: str) -> dict[str, object]:
    """The services' settings for a test run in-process: its own namespace, which is also its
    cluster id (allocation ports are hashed with it, so parallel tests' gangs never meet)."""
    return {
        "nats_url": nats_url,
        "namespace": namespace,
        "cluster_id": namespace,
        "cluster_secret": "test-secret",
    }
