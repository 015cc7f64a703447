"""Fixtures the integration tests share beyond the servers (tests/conftest.py)."""

from collections.abc import AsyncIterator

import asyncpg
import grpc
import pytest
from own_nats import own_nats  # noqa: F401 (the outage tests' fixture)

from determined.proto import api_pb2_grpc
from services.gateway.server import Gateway
from services.gateway.tables import create_schema


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[asyncpg.Pool]:
    """A connection pool on the test's own database, with the read-model schema created."""
    created = await asyncpg.create_pool(database_url, min_size=1, max_size=4)
    async with created.acquire() as connection:
        await create_schema(connection)
    yield created
    await created.close()


@pytest.fixture
async def api(gateway: Gateway) -> AsyncIterator[api_pb2_grpc.DeterminedStub]:
    """A stub on the module's own `gateway` fixture (each module starts the gateway it needs)."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{gateway.port}") as channel:
        yield api_pb2_grpc.DeterminedStub(channel)
