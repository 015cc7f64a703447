"""The ASGI application: who is calling, and errors as Determined's REST API
words them.

Every route but /info, /health and login authenticates through the same
check as the gRPC interceptor (auth.Authenticator: `Authorization: Bearer
<token>` from login, or on the live pages' streams only `?token=<token>`, or
under /proxy/ only the session cookie an HTTP login sets, which a browser
opening a notebook sends; without one the call is refused unless the gateway
allows anonymous calls),
then runs the handler acting as that user, as an RPC does. Domain errors
become the HTTP status grpc-gateway gives their gRPC code, with a JSON body
`{"code", "message", "details"}`; an error no layer explains is left to the
server (500).

An allocation token (a trial process's) is good for no route: a request
carrying one in `x-allocation-token` is refused (403) whatever its path, and
one sent as a bearer token is no session token (401).
"""

import time
from collections.abc import Awaitable, Callable, Mapping

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Lifespan, Receive, Scope, Send

from services.common.connection import limit_outage_wait
from services.gateway.auth import ALLOCATION_TOKEN, EVENT_LOG_WAIT_S, Principal, acting_as
from services.gateway.errors import Code, GatewayError, PermissionDeniedError, as_gateway_error

# Checks a call's credentials (the header names of gRPC metadata, lower case):
# Authenticator.authenticate, which raises UnauthenticatedError.
Authenticate = Callable[[Mapping[str, str]], Awaitable[Principal]]
Handler = Callable[[Request], Awaitable[Response]]

# The session token as a cookie, for the pages of a task's server (a notebook)
# that a browser opens under PROXY_PATH with no Authorization header. Only that
# path gets it, and only those routes read it: HttpOnly (no page script reads
# it), SameSite=Strict (no other site's page sends it).
SESSION_COOKIE = "det_session"
PROXY_PATH = "/proxy/"
# The HTTP edge of the domain errors (errors.py): the HTTP status of each kind,
# as grpc-gateway maps the gRPC code of the same number; 500 for any other.
HTTP_STATUS = {
    Code.INVALID_ARGUMENT: 400,
    Code.FAILED_PRECONDITION: 400,
    Code.UNAUTHENTICATED: 401,
    Code.PERMISSION_DENIED: 403,
    Code.NOT_FOUND: 404,
    Code.ALREADY_EXISTS: 409,
    Code.RESOURCE_EXHAUSTED: 429,
    Code.UNAVAILABLE: 503,
}


def error_body(error: GatewayError) -> dict[str, object]:
    return {"code": int(error.code), "message": str(error), "details": []}


def error_response(error: GatewayError) -> JSONResponse:
    return JSONResponse(error_body(error), status_code=HTTP_STATUS.get(error.code, 500))


def credentials(
    request: HTTPConnection, *, token_parameter: bool = False, cookie: bool = False
) -> dict[str, str]:
    """The request's credentials as gRPC metadata; with `token_parameter`, a
    `?token=` query parameter stands for the header (a browser's EventSource
    cannot send one); with `cookie`, the session cookie does."""
    header = request.headers.get("authorization")
    if header is None and token_parameter and request.query_params.get("token"):
        header = f"Bearer {request.query_params['token']}"
    if header is None and cookie and request.cookies.get(SESSION_COOKIE):
        header = f"Bearer {request.cookies[SESSION_COOKIE]}"
    return {} if header is None else {"authorization": header}


def set_session_cookie(response: Response, request: Request, token: str, expires_at_ns: int) -> None:
    """Gives the browser that logged in the session's cookie, until the session expires."""
    max_age = max(0, (expires_at_ns - time.time_ns()) // 1_000_000_000)
    response.set_cookie(
        SESSION_COOKIE,
        token,
        max_age=max_age,
        path=PROXY_PATH,
        secure=request.url.scheme == "https",
        httponly=True,
        samesite="strict",
    )


def clear_session_cookie(response: Response, request: Request) -> None:
    response.delete_cookie(
        SESSION_COOKIE,
        path=PROXY_PATH,
        secure=request.url.scheme == "https",
        httponly=True,
        samesite="strict",
    )


def authenticated(authenticate: Authenticate, handler: Handler, *, token_parameter: bool = False) -> Handler:
    """`handler`, run as the calling user; refused (401) without valid credentials."""

    async def as_caller(request: Request) -> Response:
        with acting_as(await authenticate(credentials(request, token_parameter=token_parameter))):
            return await handler(request)

    return unauthenticated(as_caller)


def unauthenticated(handler: Handler) -> Handler:
    """`handler`, open to anyone (login, /info, /health), its domain errors answered as JSON."""

    async def endpoint(request: Request) -> Response:
        limit_outage_wait(EVENT_LOG_WAIT_S)  # as an RPC: UNAVAILABLE rather than a hang
        try:
            return await handler(request)
        except Exception as error:
            gateway_error = as_gateway_error(error)
            if gateway_error is None:
                raise
            return error_response(gateway_error)

    return endpoint


async def _http_error(request: Request, error: Exception) -> Response:
    """Starlette's own refusals (no such route, wrong method) in the same JSON shape."""
    assert isinstance(error, HTTPException)
    code = Code.NOT_FOUND if error.status_code == 404 else Code.INVALID_ARGUMENT
    return JSONResponse(
        {"code": int(code), "message": str(error.detail), "details": []}, status_code=error.status_code
    )


class RefuseAllocationTokens:
    """Refuses every HTTP request (and WebSocket, as its handshake's answer)
    that carries an allocation token: the HTTP API has no trial process's calls
    (auth.TRIAL_RPCS are gRPC only)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and any(
            name == ALLOCATION_TOKEN.encode() for name, _ in scope["headers"]
        ):
            refusal = PermissionDeniedError(
                "an allocation token is good for no HTTP route: it is a trial process's, for its own reports"
                " over gRPC; a user calls the API with their login's token (Authorization: Bearer)"
            )
            await error_response(refusal)(scope, receive, send)
            return
        await self.app(scope, receive, send)


def application(routes: list[BaseRoute], lifespan: Lifespan[Starlette] | None = None) -> Starlette:
    app = Starlette(routes=routes, exception_handlers={HTTPException: _http_error}, lifespan=lifespan)
    app.add_middleware(RefuseAllocationTokens)
    return app
