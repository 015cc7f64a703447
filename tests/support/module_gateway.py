"""A real gateway (gRPC and HTTP) for a whole test module, over the tests' nats-server and
PostgreSQL in a namespace and database of the module's own, and an event store of that
namespace: `gateway = module_gateway.gateway` (and `store`, `module_namespace`, and clients of
it: `stub` for gRPC, `web` for HTTP) in the module. A module's GATEWAY_OVERRIDES (a dict) changes
its gateway's settings."""

import uuid
from collections.abc import AsyncIterator
from typing import Any

import grpc
import httpx
import pytest

from deploy.local.servers import PostgresServer
from determined.proto import api_pb2_grpc
from services.common.eventstore import EventStore
from services.gateway.server import Gateway
from support.pg_server import new_database
from support.security_gateway import PASSWORD, gateway_settings


@pytest.fixture(scope="module")
def module_namespace() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
async def gateway(
    nats_url: str, module_namespace: str, postgres_server: PostgresServer, request: pytest.FixtureRequest
) -> AsyncIterator[Gateway]:
    database_url = await new_database(postgres_server, module_namespace)
    settings = gateway_settings(nats_url, module_namespace, database_url, "module-test", PASSWORD)
    overrides: dict[str, Any] = getattr(request.module, "GATEWAY_OVERRIDES", {})
    started = await Gateway.start(settings.model_copy(update=overrides))
    yield started
    await started.stop()


@pytest.fixture(scope="module")
async def store(nats_url: str, module_namespace: str) -> AsyncIterator[EventStore]:
    opened = await EventStore.connect(nats_url, module_namespace)
    yield opened
    await opened.close()


@pytest.fixture(scope="module")
async def stub(gateway: Gateway) -> AsyncIterator[api_pb2_grpc.DeterminedStub]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{gateway.port}") as channel:
        yield api_pb2_grpc.DeterminedStub(channel)


@pytest.fixture(scope="module")
async def web(gateway: Gateway) -> AsyncIterator[httpx.AsyncClient]:
    assert gateway.http is not None
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{gateway.http.port}", timeout=60) as client:
        yield client
