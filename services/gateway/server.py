"""The composition root: wires the event store, the read models, the
projector and the gRPC server, and stops them in the reverse order."""

import asyncio
import contextlib
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import asyncpg
import grpc
import structlog

from determined.common.limits import MAX_MESSAGE_BYTES
from determined.proto import api_pb2_grpc
from services.common.eventstore import EventStore, StreamLimits
from services.common.skips import Skips, report_path_of
from services.gateway.api import Api
from services.gateway.auth import Authenticator, AuthInterceptor
from services.gateway.features.parts import Parts, Queries
from services.gateway.features.users.directory import UserDirectory
from services.gateway.http import http_api
from services.gateway.http.server import HttpServer, listen
from services.gateway.http.task_origin import Ports
from services.gateway.projector import Projector
from services.gateway.read_models import POSTGRES_DOWN
from services.gateway.read_only import ReplayStore, admit_operator
from services.gateway.schema import ensure_schema
from services.gateway.servicer import Servicer
from services.gateway.settings import GatewaySettings

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
    # The feature functions both edges call.
    api: Api
    server: grpc.aio.Server
    user_directory: UserDirectory
    port: int
    projector_task: asyncio.Task[None]
    # The HTTP/JSON API (None: no DET_HTTP_PORT).
    http: HttpServer | None = None

    @classmethod
    async def start(cls, settings: GatewaySettings) -> "Gateway":
        """Binds its ports (see _Ports), connects to the event log, then serves
        (with TLS when settings name a certificate) and projects. Raises
        PortInUseError when a port is taken, InitialPasswordError when a new
        cluster has no initial password for its built-in users.

        PostgreSQL need not be up: the pool connects on demand, the projector
        creates (or rebuilds) the read models once it answers, and queries
        answer UNAVAILABLE meanwhile."""
        ports = _bind(settings)
        try:
            store = await (ReplayStore if settings.replay_of else EventStore).connect(
                settings.nats_url,
                settings.namespace,
                name="gateway",
                limits=StreamLimits(settings.logs_max_bytes),
            )
            store.skips = Skips(report_path_of(settings.ready_file))  # the skipped events, for status
            if isinstance(store, ReplayStore):
                store.replay_of = settings.replay_of
        except BaseException:
            await ports.close()
            raise
        pool = await asyncpg.create_pool(
            settings.database_url, min_size=0, max_size=10, timeout=POSTGRES_CONNECT_TIMEOUT_S
        )
        users = UserDirectory(store)
        try:
            await users.start()
            if settings.replay_of:
                admit_operator(users.current, settings)
            else:
                await users.create_built_in_users(
                    settings.initial_user_password, allow_blank=settings.allow_blank_password
                )
            with contextlib.suppress(*POSTGRES_DOWN):  # else the projector creates them once it is back
                await _create_read_models(pool)
            projector = Projector(store, pool)
            api = Api(Parts(settings, store, projector, Queries(pool), users))
            authenticator = Authenticator(
                settings.cluster_secret, users, allow_anonymous=settings.allow_anonymous
            )
            http = await ports.serve(api, authenticator, settings)
        except BaseException:
            await ports.close()
            await users.stop()
            await pool.close()
            await store.close()
            raise
        task = asyncio.create_task(projector.run(), name="projector")
        task.add_done_callback(_report_projector_end)
        log.info("gateway_listening", port=ports.grpc_port, namespace=settings.namespace, tls=ports.tls)
        return cls(
            settings, store, pool, projector, api, ports.grpc_server, users, ports.grpc_port, task, http
        )

    async def stop(self) -> None:
        if self.http is not None:
            await self.http.stop()
        await self.server.stop(self.settings.grace_period_s)
        await self.user_directory.stop()
        self.projector_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.projector_task
        await self.pool.close()
        await self.store.close()
        log.info("gateway_stopped")


class _LateAuthInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]  # grpc is untyped
    """The gRPC server's interceptors are fixed when it is made, before the gateway has
    connected (see _Ports); this one hands every call to the AuthInterceptor set when the
    servicer is added. Before that, no call is served (UNIMPLEMENTED)."""

    def __init__(self) -> None:
        self.inner: AuthInterceptor | None = None

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        if self.inner is None:
            return None
        return await self.inner.intercept_service(continuation, handler_call_details)


@dataclass
class _Ports:
    """The gRPC port and the HTTP API's sockets, bound before the gateway connects to NATS
    and PostgreSQL so that none of its own outgoing connections takes one of them as its
    ephemeral local port first; served once the servicer exists."""

    grpc_server: grpc.aio.Server
    grpc_port: int
    auth: _LateAuthInterceptor
    # The HTTP API's, then tasks' pages' when they have a port of their own; none: no HTTP API.
    http_listeners: list[socket.socket]
    # Whether both serve TLS.
    tls: bool
    serving: bool = False

    async def serve(
        self, api: Api, authenticator: Authenticator, settings: GatewaySettings
    ) -> HttpServer | None:
        """Starts answering on both ports."""
        self.auth.inner = AuthInterceptor(authenticator)
        api_pb2_grpc.add_DeterminedServicer_to_server(Servicer(api), self.grpc_server)  # type: ignore[no-untyped-call]
        await self.grpc_server.start()
        self.serving = True
        return await _serve_http(api, authenticator, self.http_listeners, settings)

    async def close(self) -> None:
        """Frees both ports. grpcio frees a port only when its server stops after starting:
        one that never served starts (answering nothing, see _LateAuthInterceptor) to stop."""
        for listener in self.http_listeners:
            listener.close()
        if not self.serving:
            await self.grpc_server.start()
        await self.grpc_server.stop(None)


def _bind(settings: GatewaySettings) -> _Ports:
    """Binds the gateway's ports (PortInUseError when one is taken)."""
    http_listeners = _http_listeners(settings)
    try:
        server, port, auth = _grpc_server(settings)
    except BaseException:
        for listener in http_listeners:
            listener.close()
        raise
    return _Ports(server, port, auth, http_listeners, settings.tls_files() is not None)


def _grpc_server(settings: GatewaySettings) -> tuple[grpc.aio.Server, int, _LateAuthInterceptor]:
    """A gRPC server bound to the gateway's port, with TLS when settings name a certificate."""
    auth = _LateAuthInterceptor()
    server = grpc.aio.server(
        interceptors=[auth],
        options=[
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.so_reuseport", 0),
        ],
    )
    address = f"{settings.gateway_host}:{settings.gateway_port}"
    tls = settings.tls_files()
    try:
        if tls is None:
            port = server.add_insecure_port(address)
        else:
            cert, key = (path.read_bytes() for path in tls)
            port = server.add_secure_port(address, grpc.ssl_server_credentials([(key, cert)]))
    except RuntimeError as error:
        raise PortInUseError(f"cannot listen on port {settings.gateway_port}: {error}") from error
    if port == 0:
        raise PortInUseError(f"cannot listen on port {settings.gateway_port}: it is in use")
    return server, port, auth


def _http_listeners(settings: GatewaySettings) -> list[socket.socket]:
    """The HTTP API's socket on settings.http_port, then (settings.proxy_port set) the one of
    tasks' pages; none: no HTTP API."""
    wanted = [("HTTP", settings.http_port), ("proxy", settings.proxy_port)]
    listeners: list[socket.socket] = []
    for name, port in wanted:
        if port is None:
            break
        try:
            listeners.append(listen(settings.gateway_host, port))
        except OSError as error:
            for listener in listeners:
                listener.close()
            raise PortInUseError(f"cannot listen on {name} port {port}: {error}") from error
    return listeners


async def _serve_http(
    api: Api,
    authenticator: Authenticator,
    listeners: list[socket.socket],
    settings: GatewaySettings,
) -> HttpServer | None:
    """The HTTP API on `listeners` (none: none), with TLS when settings name a certificate."""
    if not listeners:
        return None
    bound = [listener.getsockname()[1] for listener in listeners]
    ports = Ports(ui=bound[0], proxy=bound[1]) if len(bound) > 1 else None
    try:
        http = await HttpServer.start(
            http_api(api, authenticator.authenticate, ports), *listeners, tls=settings.tls_files()
        )
    except OSError as error:
        raise PortInUseError(f"cannot serve the HTTP API: {error}") from error
    log.info("http_api_listening", port=http.port, proxy_port=None if ports is None else ports.proxy)
    return http


async def _create_read_models(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as connection:
        if await ensure_schema(connection):
            log.info("read_models_outdated", action="dropped; replaying the log from sequence 1")


def _report_projector_end(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("projector_failed", error=repr(task.exception()))
