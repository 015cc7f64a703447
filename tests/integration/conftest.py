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
