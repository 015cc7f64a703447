"""The gateway with a certificate (DET_TLS_CERT_FILE/DET_TLS_KEY_FILE): its gRPC and HTTP
ports serve TLS to the CLI's and the trials' clients that trust it, and refuse
plaintext; and it binds both ports before it connects to NATS, so that none of its own
connections can take one of them first."""

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import httpx
import pytest
from support.self_signed import write_self_signed

from deploy.local.servers import free_port, port_is_taken
from determined._client import TrialClient
from determined.cli._client import CliError
from determined.cli._client import Gateway as CliGateway
from determined.common.passwords import salted_hash
from determined.proto import api_pb2
from services.gateway.server import Gateway
from services.gateway.settings import GatewaySettings

SECRET = "tls-test-secret"
PASSWORD = "Initial-Pass1"


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_self_signed(tmp_path_factory.mktemp("tls"))


def settings_of(nats_url: str, namespace: str, database_url: str, **given: object) -> GatewaySettings:
    return GatewaySettings(
        nats_url=nats_url,
        namespace=namespace,
        database_url=database_url,
        gateway_port=free_port(),
        gateway_host="127.0.0.1",
        http_port=free_port(),
        cluster_secret=SECRET,
        cluster_id="tls-test",
        grace_period_s=0.1,
        initial_user_password=PASSWORD,
        **given,
    )


@pytest.fixture
async def gateway(
    nats_url: str, namespace: str, database_url: str, certificate: tuple[Path, Path]
) -> AsyncIterator[Gateway]:
    cert, key = certificate
    started = await Gateway.start(
        settings_of(nats_url, namespace, database_url, tls_cert_file=cert, tls_key_file=key)
    )
    yield started
    await started.stop()


def cli_gateway(address: str, **environ: str) -> CliGateway:
    return CliGateway(address, user="admin", password=PASSWORD, environ=environ)


async def get_master(gateway: CliGateway) -> api_pb2.GetMasterResponse:
    return await asyncio.to_thread(gateway.call, gateway.bare_stub.GetMaster, api_pb2.GetMasterRequest(), 5.0)


async def test_the_cli_logs_in_over_tls_with_the_certificate(
    gateway: Gateway, certificate: tuple[Path, Path]
) -> None:
    cli = cli_gateway(f"https://localhost:{gateway.port}", DET_MASTER_CERT_FILE=str(certificate[0]))
    assert (await get_master(cli)).cluster_id == "tls-test"
    token = await asyncio.to_thread(cli.login, "admin", salted_hash(PASSWORD))
    assert await asyncio.to_thread(cli.token_valid, token)


async def test_the_certificate_file_alone_asks_for_tls(
    gateway: Gateway, certificate: tuple[Path, Path]
) -> None:
    """Determined's habit: DET_MASTER_CERT_FILE with a host:port master."""
    cli = cli_gateway(f"127.0.0.1:{gateway.port}", DET_MASTER_CERT_FILE=str(certificate[0]))
    assert (await get_master(cli)).cluster_id == "tls-test"


async def test_the_trials_client_calls_over_tls(
    gateway: Gateway, certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DET_MASTER_CERT_FILE", str(certificate[0]))
    client = TrialClient(f"https://127.0.0.1:{gateway.port}", "not-a-token", retry_for_s=5.0)
    try:
        with pytest.raises(grpc.RpcError) as refused:
            await asyncio.to_thread(client.get_trial_metadata, 1)
    finally:
        client.close()
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED  # it got through TLS to the gateway


async def test_the_http_api_serves_https(gateway: Gateway, certificate: tuple[Path, Path]) -> None:
    assert gateway.http is not None
    trusted = ssl.create_default_context(cafile=str(certificate[0]))
    async with httpx.AsyncClient(verify=trusted, timeout=10) as client:
        answer = await client.get(f"https://localhost:{gateway.http.port}/info")
    assert answer.status_code == 200
    assert answer.json()["cluster_id"] == "tls-test"


async def test_plaintext_and_untrusting_clients_are_refused(
    gateway: Gateway, certificate: tuple[Path, Path]
) -> None:
    assert gateway.http is not None
    with pytest.raises(CliError) as refused:
        await get_master(cli_gateway(f"localhost:{gateway.port}"))
    assert refused.value.code == "UNAVAILABLE"
    with pytest.raises(CliError, match="its TLS certificate is not trusted here") as refused:
        await get_master(cli_gateway(f"https://localhost:{gateway.port}"))
    assert refused.value.code == "UNAVAILABLE"
    async with httpx.AsyncClient(timeout=10) as client:
        with pytest.raises(httpx.HTTPError):
            await client.get(f"http://localhost:{gateway.http.port}/info")
        with pytest.raises(httpx.ConnectError):  # the system's CAs do not vouch for it
            await client.get(f"https://localhost:{gateway.http.port}/info")


async def test_a_certificate_for_another_name_is_checked_by_that_name(
    nats_url: str, namespace: str, database_url: str, tmp_path: Path
) -> None:
    cert, key = write_self_signed(tmp_path, dns_names=("master.example",), ips=())
    started = await Gateway.start(
        settings_of(nats_url, namespace, database_url, tls_cert_file=cert, tls_key_file=key)
    )
    try:
        named = cli_gateway(
            f"https://127.0.0.1:{started.port}",
            DET_MASTER_CERT_FILE=str(cert),
            DET_MASTER_CERT_NAME="master.example",
        )
        assert (await get_master(named)).cluster_id == "tls-test"
        with pytest.raises(CliError, match="names another host"):
            await get_master(cli_gateway(f"https://127.0.0.1:{started.port}", DET_MASTER_CERT_FILE=str(cert)))
    finally:
        await started.stop()


def test_the_certificate_and_key_go_together(certificate: tuple[Path, Path]) -> None:
    with pytest.raises(ValueError, match="DET_TLS_CERT_FILE and DET_TLS_KEY_FILE go together"):
        GatewaySettings(database_url="postgresql://x", tls_cert_file=certificate[0])


async def test_the_ports_are_bound_before_connecting(namespace: str, database_url: str) -> None:
    """While the gateway waits for NATS (nothing listens at its URL), its ports are taken
    already; given up, it frees them."""
    settings = settings_of(f"nats://127.0.0.1:{free_port()}", namespace, database_url)
    assert settings.http_port is not None
    starting = asyncio.create_task(Gateway.start(settings))
    try:
        async with asyncio.timeout(10):
            while not (port_is_taken(settings.gateway_port) and port_is_taken(settings.http_port)):
                await asyncio.sleep(0.05)
        assert not starting.done()
    finally:
        starting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await starting
    assert not port_is_taken(settings.gateway_port)
    assert not port_is_taken(settings.http_port)
