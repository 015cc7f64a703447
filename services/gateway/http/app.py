"""The ASGI application: who is calling, and errors as Determined's REST API
words them.

Every route but /info, /health and login authenticates through the same
check as the gRPC interceptor (auth.Authenticator: `Authorization: Bearer
<token>` from login, or on the live pages' streams only `?token=<token>`;
without one the call is refused unless the gateway allows anonymous calls),
then runs the handler acting as that user, as an RPC does. Domain errors
become the HTTP status grpc-gateway gives their gRPC code, with a JSON body
`{"code", "message", "details"}`; an error no layer explains is left to the
server (500).

An allocation token (a trial process's) is good for no route: a request
carrying one in `x-allocation-token` is refused (403) whatever its path, and
one sent as a bearer token is no session token (401).
"""

from collections.abc import Awaitable, Callable, Mapping

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from services.common.connection import limit_outage_wait
from services.gateway.auth import ALLOCATION_TOKEN, EVENT_LOG_WAIT_S, Principal, acting_as
from services.gateway.errors import Code, GatewayError, PermissionDeniedError, as_gateway_error

# Checks a call's credentials (the header names of gRPC metadata, lower case):
# Authenticator.authenticate, which raises UnauthenticatedError.
Authenticate = Callable[[Mapping[str, str]], Awaitable[Principal]]
Handler = Callable[[Request], Awaitable[Response]]

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


def credentials(request: Request, *, token_parameter: bool = False) -> dict[str, str]:
    """The request's credentials as gRPC metadata; with `token_parameter`, a
    `?token=` query parameter stands for the header (a browser's EventSource
    cannot send one)."""
    header = request.headers.get("authorization")
    if header is None and token_parameter and request.query_params.get("token"):
        header = f"Bearer {request.query_params['token']}"
    return {} if header is None else {"authorization": header}


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
    """Refuses every HTTP request that carries an allocation token: the HTTP
    API has no trial process's calls (auth.TRIAL_RPCS are gRPC only)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and any(name == ALLOCATION_TOKEN.encode() for name, _ in scope["headers"]):
            refusal = PermissionDeniedError(
                "an allocation token is good for no HTTP route: it is a trial process's, for its own reports"
                " over gRPC; a user calls the API with their login's token (Authorization: Bearer)"
            )
            await error_response(refusal)(scope, receive, send)
            return
        await self.app(scope, receive, send)


def application(routes: list[BaseRoute]) -> Starlette:
    app = Starlette(routes=routes, exception_handlers={HTTPException: _http_error})
    app.add_middleware(RefuseAllocationTokens)
    return app
