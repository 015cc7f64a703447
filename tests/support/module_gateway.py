"""A real gateway (gRPC and HTTP) for a whole test module, over the tests' nats-server and
PostgreSQL in a namespace and database of the module's own, and an event store of that
namespace: `gateway = module_gateway.gateway` (and `store`, `module_namespace`) in the module."""

import uuid
from collections.abc import AsyncIterator

import pytest

from deploy.local.servers import PostgresServer
from services.common.eventstore import EventStore
from services.gateway.server import Gateway
from support.pg_server import new_database
from support.security_gateway import PASSWORD, gateway_settings


@pytest.fixture(scope="module")
def module_namespace() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
async def gateway(
    nats_url: str, module_namespace: str, postgres_server: PostgresServer
) -> AsyncIterator[Gateway]:
    database_url = await new_database(postgres_server, module_namespace)
    started = await Gateway.start(
        gateway_settings(nats_url, module_namespace, database_url, "module-test", PASSWORD)
    )
    yield started
    await started.stop()


@pytest.fixture(scope="module")
async def store(nats_url: str, module_namespace: str) -> AsyncIterator[EventStore]:
    opened = await EventStore.connect(nats_url, module_namespace)
    yield opened
    await opened.close()
