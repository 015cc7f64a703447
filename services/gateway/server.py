"""The composition root: wires the event store, the read models, the
projector and the gRPC server, and stops them in the reverse order."""

import asyncio
import contextlib
import socket
from dataclasses import dataclass

import asyncpg
import grpc
import structlog

from determined.proto import api_pb2_grpc
from services.common.eventstore import EventStore, StreamLimits
from services.gateway.auth import Authenticator, AuthInterceptor
from services.gateway.http import http_api
from services.gateway.http.server import HttpServer, listen
from services.gateway.projector import Projector
from services.gateway.queries import Queries
from services.gateway.servicer import Servicer
from services.gateway.settings import MAX_MESSAGE_BYTES, GatewaySettings
from services.gateway.tables import POSTGRES_DOWN, ensure_schema
from services.gateway.user_directory import UserDirectory

log = structlog.get_logger()

# How long opening a connection to PostgreSQL may take before the query (or
# the projector's attempt) counts it as down.
POSTGRES_CONNECT_TIMEOUT_S = 5.0


class PortInUseError(Exception):
    pass


@dataclass
class Gateway:
    settings: GatewaySettings
    store: EventStore
    pool: asyncpg.Pool
    projector: Projector
    servicer: Servicer
    server: grpc.aio.Server
    user_directory: UserDirectory
    port: int
    projector_task: asyncio.Task[None]
    # The HTTP/JSON API (None: no DET_HTTP_PORT).
    http: HttpServer | None = None

    @classmethod
    async def start(cls, settings: GatewaySettings) -> "Gateway":
        """Connects to the event log, starts projecting and listening. Raises
        PortInUseError when the port is taken, InitialPasswordError when a new
        cluster has no initial password for its built-in users.

        PostgreSQL need not be up: the pool connects on demand, the projector
        creates (or rebuilds) the read models once it answers, and queries
        answer UNAVAILABLE meanwhile."""
        http_listener = _http_listener(settings)
        try:
            store = await EventStore.connect(
                settings.nats_url, settings.namespace, name="gateway", limits=StreamLimits(settings.logs_max_bytes)
            )
        except BaseException:
            if http_listener is not None:
                http_listener.close()
            raise
        pool = await asyncpg.create_pool(
            settings.database_url, min_size=0, max_size=10, timeout=POSTGRES_CONNECT_TIMEOUT_S
        )
        users = UserDirectory(store)
        try:
            await users.start()
            await users.create_built_in_users(
                settings.initial_user_password, allow_blank=settings.allow_blank_password
            )
            with contextlib.suppress(*POSTGRES_DOWN):  # else the projector creates them once it is back
                await _create_read_models(pool)
            projector = Projector(store, pool)
            servicer = Servicer(settings, store, Queries(pool), projector, users)
            authenticator = Authenticator(settings.cluster_secret, users, allow_anonymous=settings.allow_anonymous)
            server, port = await _serve(servicer, authenticator, settings)
            http = await _serve_http(servicer, authenticator, http_listener, server)
        except BaseException:
            if http_listener is not None:
                http_listener.close()
            await users.stop()
            await pool.close()
            await store.close()
            raise
        task = asyncio.create_task(projector.run(), name="projector")
        task.add_done_callback(_report_projector_end)
        log.info("gateway_listening", port=port, namespace=settings.namespace)
        return cls(settings, store, pool, projector, servicer, server, users, port, task, http)

    async def stop(self) -> None:
        if self.http is not None:
            await self.http.stop()
        await self.server.stop(self.settings.grace_period_s)
        await self.servicer.close()
        await self.user_directory.stop()
        self.projector_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.projector_task
        await self.pool.close()
        await self.store.close()
        log.info("gateway_stopped")


async def _serve(
    servicer: Servicer, authenticator: Authenticator, settings: GatewaySettings
) -> tuple[grpc.aio.Server, int]:
    server = grpc.aio.server(
        interceptors=[AuthInterceptor(authenticator)],
        options=[
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.so_reuseport", 0),
        ],
    )
    api_pb2_grpc.add_DeterminedServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
    address = f"{settings.gateway_host}:{settings.gateway_port}"
    try:
        port = server.add_insecure_port(address)
    except RuntimeError as error:
        raise PortInUseError(f"cannot listen on port {settings.gateway_port}: {error}") from error
    if port == 0:
        raise PortInUseError(f"cannot listen on port {settings.gateway_port}: it is in use")
    await server.start()
    return server, port


def _http_listener(settings: GatewaySettings) -> socket.socket | None:
    """The HTTP API's socket on settings.http_port (None: no HTTP API)."""
    if settings.http_port is None:
        return None
    try:
        return listen(settings.gateway_host, settings.http_port)
    except OSError as error:
        raise PortInUseError(f"cannot listen on HTTP port {settings.http_port}: {error}") from error


async def _serve_http(
    servicer: Servicer, authenticator: Authenticator, listener: socket.socket | None, grpc_server: grpc.aio.Server
) -> HttpServer | None:
    """The HTTP API on `listener` (None: none); stops the gRPC server when it cannot start."""
    if listener is None:
        return None
    try:
        http = await HttpServer.start(http_api(servicer, authenticator.authenticate), listener)
    except OSError as error:
        await grpc_server.stop(None)
        raise PortInUseError(f"cannot serve the HTTP API: {error}") from error
    log.info("http_api_listening", port=http.port)
    return http


async def _create_read_models(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as connection:
        if await ensure_schema(connection):
            log.info("read_models_outdated", action="dropped; replaying the log from sequence 1")


def _report_projector_end(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("projector_failed", error=repr(task.exception()))
