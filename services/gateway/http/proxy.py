"""The gateway's /proxy/<task id>/: a notebook's, TensorBoard's or shell's
server, opened through the gateway behind the user's login.

Who: a session token as `Authorization: Bearer`, or the session cookie an
HTTP login sets (a browser opening a notebook's page has nothing else; a
request riding on the cookie must come from the gateway's own pages, see
proxy_rules.cross_origin). Only the task's owner and admins get through
(the tasks feature's Tasks.proxy_target); a task that is not ready, has ended, or whose server
does not answer is a 502 naming the task and how it stands.

What: HTTP of any method, forwarded with its full path and query unchanged
(a task's server is started with /proxy/<task id>/ as its base URL) to the
task's address, request and answer bodies streamed as they come, never held
whole; WebSocket, text and binary frames both ways, the subprotocol the task
chose and the close codes passed on. A shell's WebSocket is bridged to its
sshd's TCP port instead: binary frames carry the bytes both ways (the
`det shell` CLI's ssh ProxyCommand speaks it).

Timeouts bound every wait on a task's server (connecting, then each read),
so a request never hangs on a task that stopped answering.
"""

import asyncio
import contextlib
import html
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx
import structlog
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, HTTPConnection, Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from services.common.connection import limit_outage_wait
from services.common.tokens import task_proxy_token
from services.gateway.auth import EVENT_LOG_WAIT_S, acting_as
from services.gateway.errors import (
    FailedPreconditionError,
    GatewayError,
    PermissionDeniedError,
    UnauthenticatedError,
    as_gateway_error,
)
from services.gateway.features.tasks.idle import ProxyActivity
from services.gateway.features.tasks.queries import ProxyTarget
from services.gateway.http import proxy_rules as rules
from services.gateway.http.app import Authenticate, credentials, error_body, error_response
from services.gateway.http.task_origin import origin, path_and_query

log = structlog.get_logger()

ROUTE = "/proxy/{task_id}/{path:path}"
METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
# Connecting to a task's server; then each read of its answer (a JupyterLab
# save or export of a large notebook may take minutes, never this long).
CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 300.0
# The largest WebSocket message passed on either way (uvicorn's own limit for
# the browser's side).
MAX_WEBSOCKET_MESSAGE = 16 * 1024 * 1024
# Idle connections to tasks' servers kept for the next request.
KEPT_CONNECTIONS = 64
# The most bytes of a shell's TCP stream sent as one WebSocket frame.
SHELL_CHUNK = 64 * 1024

# A look for idle TensorBoards that failed is made again this much later.
IDLE_RETRY_S = 5.0

# The task a /proxy/<task id>/ names, if the caller may open it (the tasks
# feature's Tasks.proxy_target: NotFoundError, PermissionDeniedError otherwise).
Lookup = Callable[[str], Awaitable[ProxyTarget]]
# Kills the TensorBoards the proxy saw unused for their idle_timeout (Tasks.stop_idle_tensorboards);
# answers the seconds until the next look.
StopIdle = Callable[[ProxyActivity, int], Awaitable[float]]


@dataclass(frozen=True)
class Timeouts:
    connect_s: float = CONNECT_TIMEOUT_S
    read_s: float = READ_TIMEOUT_S


class TaskProxy:
    def __init__(
        self,
        authenticate: Authenticate,
        lookup: Lookup,
        secret: str,
        stop_idle: StopIdle,
        timeouts: Timeouts = Timeouts(),
        ui_port: int | None = None,
    ) -> None:
        self.authenticate = authenticate
        self.lookup = lookup
        self.secret = secret
        self.stop_idle = stop_idle
        self.timeouts = timeouts
        # The web UI's port when tasks' pages have one of their own (task_origin.py): the
        # login page is there. None: on the same port as these pages.
        self.ui_port = ui_port
        self.activity = ProxyActivity()
        # One pool of connections to every task's server, as many as requests are in flight (no
        # user's notebook waits for another's to free one), kept open a while; none of the
        # gateway environment's proxy settings.
        self.client = httpx.AsyncClient(
            timeout=httpx.Timeout(timeouts.read_s, connect=timeouts.connect_s, pool=timeouts.connect_s),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=KEPT_CONNECTIONS),
            trust_env=False,
        )

    def routes(self) -> list[BaseRoute]:
        return [Route(ROUTE, self.http, methods=METHODS), WebSocketRoute(ROUTE, self.websocket)]

    @contextlib.asynccontextmanager
    async def running(self, app: Starlette) -> AsyncIterator[None]:
        """The HTTP server's lifespan: idle TensorBoards are looked for while it
        serves, and the connections to tasks close with it."""
        watching = asyncio.create_task(self._stop_idle_tensorboards(), name="tensorboard-idle")
        try:
            yield
        finally:
            watching.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watching
            await self.client.aclose()

    async def _stop_idle_tensorboards(self) -> None:
        watching_since_ns = time.time_ns()
        while True:
            try:
                pause_s = await self.stop_idle(self.activity, watching_since_ns)
            except Exception as error:  # the read models or the log down: look again later
                log.warning("tensorboard_idle_check_failed", error=str(error) or type(error).__name__)
                pause_s = IDLE_RETRY_S
            await asyncio.sleep(pause_s)

    # -- HTTP ----------------------------------------------------------------------------

    async def http(self, request: Request) -> Response:
        limit_outage_wait(EVENT_LOG_WAIT_S)  # as any route: UNAVAILABLE rather than a hang
        try:
            target = await self._allowed(request)
            if target.task_type == "SHELL":
                raise FailedPreconditionError(
                    f"{rules.named(target)} takes an SSH connection over a WebSocket to this address"
                    f" (det shell open {target.task_id}), not HTTP"
                )
            self.activity.used(target.task_id, time.time_ns())
            return await self._forward(request, target)
        except Exception as error:
            gateway_error = as_gateway_error(error)
            if gateway_error is None:
                raise
            if isinstance(gateway_error, UnauthenticatedError):
                ui = "" if self.ui_port is None else origin(request.scope, self.ui_port)
                return _log_in_first(request, gateway_error, ui)
            return _refused(gateway_error)

    async def _forward(self, request: Request, target: ProxyTarget) -> Response:
        url = _task_url("http", target, request.scope)
        headers = rules.request_headers(
            request.scope["headers"],
            client=request.client.host if request.client else "",
            scheme=request.url.scheme,
            task_token=task_proxy_token(self.secret, target.task_id),
        )
        has_body = "content-length" in request.headers or "transfer-encoding" in request.headers
        sent = self.client.build_request(
            request.method, url, headers=headers, content=request.stream() if has_body else None
        )
        try:
            answer = await self.client.send(sent, stream=True)
        except httpx.TimeoutException as error:
            raise rules.unreachable(target, f"no answer within {_limit(error, self.timeouts)} s") from error
        except httpx.TransportError as error:
            raise rules.unreachable(target, str(error) or type(error).__name__) from error
        except ClientDisconnect:
            return Response(status_code=400)  # the client left while sending its body: nobody reads this
        return _Forwarded(answer, target)

    # -- WebSocket -----------------------------------------------------------------------

    async def websocket(self, websocket: WebSocket) -> None:
        limit_outage_wait(EVENT_LOG_WAIT_S)
        try:
            target = await self._allowed(websocket)
            self.activity.opened(target.task_id, time.time_ns())
            try:
                if target.task_type == "SHELL":
                    await self._bridge_shell(websocket, target)
                else:
                    await self._bridge_websocket(websocket, target)
            finally:
                self.activity.closed(target.task_id, time.time_ns())
        except InvalidStatus as refused:  # the task's server answered the handshake with a refusal
            answer = refused.response
            await websocket.send_denial_response(
                Response(
                    bytes(answer.body or b""),
                    answer.status_code,
                    media_type=answer.headers.get("content-type"),
                )
            )
        except Exception as error:
            gateway_error = as_gateway_error(error)
            if gateway_error is None or websocket.application_state != WebSocketState.CONNECTING:
                raise
            await websocket.send_denial_response(_refused(gateway_error))

    async def _bridge_websocket(self, websocket: WebSocket, target: ProxyTarget) -> None:
        headers = rules.request_headers(
            websocket.scope["headers"],
            client=websocket.client.host if websocket.client else "",
            scheme="https" if websocket.url.scheme == "wss" else "http",
            task_token=task_proxy_token(self.secret, target.task_id),
        )
        try:
            task = await connect(
                _task_url("ws", target, websocket.scope),
                additional_headers=[
                    (name.decode("latin-1"), value.decode("latin-1"))
                    for name, value in headers
                    if name != b"host"
                ],
                subprotocols=websocket.scope.get("subprotocols") or None,
                user_agent_header=None,
                compression=None,
                proxy=None,
                open_timeout=self.timeouts.connect_s,
                max_size=MAX_WEBSOCKET_MESSAGE,
            )
        except InvalidStatus:
            raise  # the task's own answer, passed on by `websocket`
        except (OSError, TimeoutError, InvalidHandshake) as error:
            raise rules.unreachable(target, str(error) or type(error).__name__) from error
        await websocket.accept(subprotocol=task.subprotocol)
        try:
            await _until_either_ends(_frames_to_task(websocket, task), _frames_to_client(websocket, task))
        finally:
            await task.close()
            await _close(
                websocket,
                rules.sendable_close_code(task.close_code, otherwise=rules.CLOSE_INTERNAL_ERROR),
                task.close_reason or "",
            )

    async def _bridge_shell(self, websocket: WebSocket, target: ProxyTarget) -> None:
        host, port = _host_port(target)
        try:
            async with asyncio.timeout(self.timeouts.connect_s):
                reader, writer = await asyncio.open_connection(host, port)
        except (OSError, TimeoutError) as error:
            raise rules.unreachable(target, str(error) or type(error).__name__) from error
        await websocket.accept()
        try:
            await _until_either_ends(_bytes_to_task(websocket, writer), _bytes_to_client(websocket, reader))
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
            await _close(websocket, rules.CLOSE_NORMAL, "")

    # -- who may ---------------------------------------------------------------------------

    async def _allowed(self, connection: HTTPConnection) -> ProxyTarget:
        """The task whose server the caller may reach; the refusal's error otherwise."""
        principal = await self.authenticate(credentials(connection, cookie=True))
        if "authorization" not in connection.headers and rules.cross_origin(
            connection.headers.get("origin"), connection.headers.get("host")
        ):
            raise PermissionDeniedError(
                f"a request from a page of {connection.headers.get('origin')} may not use the login cookie"
                " of this gateway; open the task from the gateway's own address"
            )
        with acting_as(principal):
            target = await self.lookup(connection.path_params["task_id"])
        if not target.proxy_address:
            raise rules.not_ready(target)
        return target


class _Forwarded(Response):
    """The task's answer, passed on as it comes (never held whole)."""

    def __init__(self, answer: httpx.Response, target: ProxyTarget) -> None:
        self.status_code = answer.status_code
        self.raw_headers = rules.response_headers(answer.headers.raw)
        self.background = None
        self.answer = answer
        self.target = target

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await send(
                {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
            )
            async for chunk in self.answer.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        except httpx.HTTPError as error:
            # Left incomplete: the server cuts the connection, so the client sees a broken answer.
            log.warning(
                "proxy_answer_cut", task_id=self.target.task_id, error=str(error) or type(error).__name__
            )
        except OSError:
            pass  # the client went away
        finally:
            await self.answer.aclose()


async def _frames_to_task(websocket: WebSocket, task: ClientConnection) -> None:
    """The client's frames to the task until the client closes (its close code passed on)."""
    with contextlib.suppress(ConnectionClosed):
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                code = rules.sendable_close_code(message.get("code"), otherwise=rules.CLOSE_GOING_AWAY)
                await task.close(code, message.get("reason") or "")
                return
            data = message.get("bytes")
            await task.send(data if data is not None else message["text"])


async def _frames_to_client(websocket: WebSocket, task: ClientConnection) -> None:
    """The task's frames to the client until the task closes."""
    with contextlib.suppress(ConnectionClosed, WebSocketDisconnect):
        async for frame in task:
            if isinstance(frame, bytes):
                await websocket.send_bytes(frame)
            else:
                await websocket.send_text(frame)


async def _bytes_to_task(websocket: WebSocket, writer: asyncio.StreamWriter) -> None:
    """A shell client's binary frames, written to sshd as they are."""
    with contextlib.suppress(OSError):
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                return
            data = message.get("bytes")
            if data is None:
                await _close(
                    websocket, rules.CLOSE_UNSUPPORTED_DATA, "a shell's connection takes binary frames only"
                )
                return
            writer.write(data)
            await writer.drain()


async def _bytes_to_client(websocket: WebSocket, reader: asyncio.StreamReader) -> None:
    """What sshd sends, as binary frames, until it closes its side."""
    with contextlib.suppress(OSError, WebSocketDisconnect):
        while chunk := await reader.read(SHELL_CHUNK):
            await websocket.send_bytes(chunk)


async def _until_either_ends(*pumps: Coroutine[Any, Any, None]) -> None:
    """Runs both directions of a bridge until one ends, then stops the other."""
    running = [asyncio.ensure_future(pump) for pump in pumps]
    try:
        done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
        for pump in done:
            pump.result()
    finally:
        for pump in running:
            pump.cancel()
        await asyncio.gather(*running, return_exceptions=True)


async def _close(websocket: WebSocket, code: int, reason: str) -> None:
    """Closes the client's WebSocket unless either side already has."""
    if (
        websocket.application_state == WebSocketState.CONNECTED
        and websocket.client_state == WebSocketState.CONNECTED
    ):
        with contextlib.suppress(WebSocketDisconnect, OSError, RuntimeError):
            await websocket.close(code, reason)


def _task_url(scheme: str, target: ProxyTarget, scope: Scope) -> str:
    """The task's URL of the request's own path (raw, as the client encoded it) and query."""
    host, port = _host_port(target)
    shown_host = f"[{host}]" if ":" in host else host
    return f"{scheme}://{shown_host}:{port}{path_and_query(scope)}"


def _host_port(target: ProxyTarget) -> tuple[str, int]:
    try:
        return rules.address(target.proxy_address)
    except ValueError as error:
        raise rules.unreachable(target, str(error)) from error


def _limit(error: httpx.TimeoutException, timeouts: Timeouts) -> float:
    return timeouts.connect_s if isinstance(error, httpx.ConnectTimeout) else timeouts.read_s


def _refused(error: GatewayError) -> Response:
    if isinstance(error, rules.TaskUnreachableError):
        return JSONResponse(error_body(error), status_code=502)
    return error_response(error)


def _log_in_first(request: Request, error: UnauthenticatedError, ui: str) -> Response:
    """401; to a browser, a page that leads to the web UI's login (at `ui`, the web UI's
    origin; "": this one) and back here."""
    if "text/html" not in request.headers.get("accept", ""):
        return error_response(error)
    back = quote(request.url.path, safe="/")
    return HTMLResponse(
        "<!doctype html><title>Log in</title>"
        f"<p>{html.escape(str(error))}</p>"
        f'<p><a href="{html.escape(ui)}/#/login?next={back}">Log in</a>, then this page opens.</p>',
        status_code=401,
    )
