"""A real gateway (gRPC and HTTP) over the tests' nats-server and PostgreSQL,
for the security tests of the gateway's checks: the admin, and a non-admin
"mallory" who plays the attacker."""

from collections.abc import AsyncIterator

import grpc
import pytest

from deploy.local.servers import free_port
from determined.proto import api_pb2, api_pb2_grpc
from services.gateway.server import Gateway
from services.gateway.settings import GatewaySettings

SECRET = "security-test-secret"
PASSWORD = "Initial-Pass1"
MALLORY_PASSWORD = "Mallory-Pass1"
Metadata = tuple[tuple[str, str], ...]


def gateway_settings(
    nats_url: str, namespace: str, database_url: str, cluster_id: str, password: str = PASSWORD
) -> GatewaySettings:
    """A gateway on free ports (gRPC and HTTP) of the tests' servers, its users
    logging in with passwords."""
    return GatewaySettings(
        nats_url=nats_url,
        namespace=namespace,
        database_url=database_url,
        gateway_port=free_port(),
        gateway_host="127.0.0.1",
        http_port=0,
        cluster_secret=SECRET,
        cluster_id=cluster_id,
        grace_period_s=0.1,
        initial_user_password=password,
    )


@pytest.fixture
async def gateway(nats_url: str, namespace: str, database_url: str) -> AsyncIterator[Gateway]:
    started = await Gateway.start(gateway_settings(nats_url, namespace, database_url, "security-test"))
    yield started
    await started.stop()


async def logged_in(
    api: api_pb2_grpc.DeterminedStub, username: str = "admin", password: str = PASSWORD
) -> Metadata:
    """The metadata of calls made as `username`."""
    response = await api.Login(api_pb2.LoginRequest(username=username, password=password))
    return (("authorization", f"Bearer {response.token}"),)


async def mallory(api: api_pb2_grpc.DeterminedStub, admin: Metadata) -> Metadata:
    """Creates the non-admin user mallory (as the admin) and logs her in."""
    request = api_pb2.CreateUserRequest(username="mallory", password=MALLORY_PASSWORD)
    await api.CreateUser(request, metadata=admin)
    return await logged_in(api, "mallory", MALLORY_PASSWORD)


async def refused(call: object) -> grpc.aio.AioRpcError:
    """The error a call that must fail ends with."""
    try:
        await call  # type: ignore[misc]
    except grpc.aio.AioRpcError as error:
        return error
    raise AssertionError("the call was not refused")
