"""Serving the HTTP API with uvicorn inside the gateway's event loop, beside
the gRPC server: same process, same servicer, same read models."""

import asyncio
import contextlib
import logging
import socket
from collections.abc import Iterator
from pathlib import Path

import uvicorn
from starlette.types import ASGIApp

# How long a start may take before the gateway gives up on it.
STARTUP_TIMEOUT_S = 10.0


class _RefusalIsNoError(logging.Filter):
    """uvicorn's websockets-sansio protocol logs this ERROR after every WebSocket
    refused with an HTTP answer (the ASGI denial response, which is how /proxy/
    refuses one: 401, 403, 404, 502) although the refusal went out whole
    (Kludex/uvicorn#3138, open). Here every WebSocket is accepted, refused that
    way, or closed by Starlette (which uvicorn counts as complete), so the line
    says nothing wrong."""

    MESSAGE = "ASGI callable returned without completing handshake."

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != self.MESSAGE


_REFUSAL_IS_NO_ERROR = _RefusalIsNoError()


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """The gateway's own signal handlers stop it (uvicorn's would replace them)."""
        yield


class HttpServer:
    def __init__(self, server: _Server, task: "asyncio.Task[None]", ports: list[int]) -> None:
        self._server = server
        self._task = task
        # The first listener's port, and every listener's.
        self.port = ports[0]
        self.ports = ports

    @classmethod
    async def start(
        cls, app: ASGIApp, *listeners: socket.socket, tls: tuple[Path, Path] | None = None
    ) -> "HttpServer":
        """Serves on `listeners` (from `listen`); with `tls` (certificate and key files), HTTPS."""
        cert, key = tls or (None, None)
        config = uvicorn.Config(
            app,
            lifespan="on",  # the app's lifespan closes what it holds open (the proxy's connections)
            log_config=None,
            access_log=False,
            # The client's address is the connection's: uvicorn's default believes a
            # X-Forwarded-For from 127.0.0.1, which would let a local user choose the address
            # the login rate limit counts.
            proxy_headers=False,
            timeout_graceful_shutdown=1,
            ssl_certfile=cert,
            ssl_keyfile=key,
        )
        logging.getLogger("uvicorn.error").addFilter(
            _REFUSAL_IS_NO_ERROR
        )  # the same filter again is no second one
        server = _Server(config)
        task = asyncio.create_task(server.serve(sockets=list(listeners)), name="http-api")
        async with asyncio.timeout(STARTUP_TIMEOUT_S):
            while not server.started:
                if task.done():
                    task.result()  # the start failed: raise why
                    raise OSError("the HTTP server stopped while starting")
                await asyncio.sleep(0.01)
        return cls(server, task, [listener.getsockname()[1] for listener in listeners])

    async def stop(self) -> None:
        """Stops listening; open streams (followed logs) get a moment to end."""
        self._server.should_exit = True
        await self._task


def listen(host: str, port: int) -> socket.socket:
    """The HTTP API's listening socket on host:port (0: any free port); OSError when it cannot.
    The gateway opens it before connecting to NATS and PostgreSQL, so that none of its own
    outgoing connections takes the port as its ephemeral local port first."""
    return socket.create_server((host, port), family=_family(host), reuse_port=False)


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET
