"""Tasks' pages on an origin of their own (DET_PROXY_PORT).

A notebook's or TensorBoard's page is the task's code, untrusted like a
trial's. Served from the web UI's origin, its scripts could script the UI's
windows (and a login typed into one), read the login token a UI tab keeps in
its sessionStorage once the user opens the task in that tab, or register a
service worker over the UI's pages. So the gateway serves /proxy/<task id>/
on a port of its own: the same host on another port is another origin to the
browser, and none of that crosses between origins.

- On the proxy's port only /proxy/ is served; anything else is a 404 naming
  the web UI's address.
- On the web UI's port, a browser's request under /proxy/ (no bearer token:
  it rides on the login cookie, or has nothing) is redirected to the same path
  and query on the proxy's port (307: method and body kept), so the links the
  CLI prints and Determined's clients build keep working; a browser's
  WebSocket there is refused, naming the proxy's address (a handshake follows
  no redirect). A client that sends its token (`det shell`, a script) is
  served on either port: no browser runs what it gets.

The login cookie (Path=/proxy/) that the web UI's login sets reaches the
proxy's port: browsers keep cookies per host, not per port, and SameSite
counts both as one site. Tasks share the proxy's origin with one another,
which only an admin opening other users' tasks need mind (README, "What a
trial can reach").
"""

import string
from dataclasses import dataclass

from starlette.datastructures import Headers
from starlette.responses import RedirectResponse
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket

from services.gateway.errors import FailedPreconditionError, NotFoundError
from services.gateway.http.app import PROXY_PATH, error_response

# What a Host header may hold: a DNS name or an IP address (v6 in brackets), and a port.
_HOST_CHARACTERS = frozenset(string.ascii_letters + string.digits + ".-:[]")


@dataclass(frozen=True)
class Ports:
    """The ports the HTTP server listens on (as bound: a setting of 0 is a free port)."""

    ui: int
    proxy: int


class TaskOrigin:
    """Keeps each of the two ports to its own pages (the module's rules)."""

    def __init__(self, app: ASGIApp, ports: Ports) -> None:
        self.app = app
        self.ports = ports

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        under_proxy = scope["path"].startswith(PROXY_PATH)
        if local_port(scope) == self.ports.proxy:
            if not under_proxy:
                wrong = NotFoundError(
                    f"{scope['path']}: this address serves tasks' pages only (/proxy/<task id>/);"
                    f" the web UI and the API are at {origin(scope, self.ports.ui)}"
                )
                await error_response(wrong)(scope, receive, send)
                return
        elif under_proxy and not has_bearer_token(scope):
            await self._to_proxy_port(scope, receive, send)
            return
        await self.app(scope, receive, send)

    async def _to_proxy_port(self, scope: Scope, receive: Receive, send: Send) -> None:
        address = origin(scope, self.ports.proxy) + path_and_query(scope)
        if scope["type"] == "http":
            await RedirectResponse(address, status_code=307)(scope, receive, send)
            return
        refusal = FailedPreconditionError(
            f"tasks' pages are served at {origin(scope, self.ports.proxy)}: open {address}"
        )
        await WebSocket(scope, receive, send).send_denial_response(error_response(refusal))


def local_port(scope: Scope) -> int | None:
    """The port the connection came in on."""
    server = scope.get("server")
    return server[1] if server and len(server) > 1 else None


def has_bearer_token(scope: Scope) -> bool:
    return Headers(scope=scope).get("authorization", "").lower().startswith("bearer ")


def origin(scope: Scope, port: int) -> str:
    """The request's scheme and host, as the client named them, with `port`."""
    secure = scope["scheme"] in ("https", "wss")
    host = _host_name(Headers(scope=scope).get("host", "")) or _bracketed(str(scope["server"][0]))
    return f"{'https' if secure else 'http'}://{host}:{port}"


def path_and_query(scope: Scope) -> str:
    """The request's path as the client encoded it, and its query."""
    raw_path: bytes = scope.get("raw_path") or scope["path"].encode()
    query: bytes = scope.get("query_string", b"")
    return raw_path.decode("latin-1") + ("?" + query.decode("latin-1") if query else "")


def _host_name(host: str) -> str:
    """A Host header less its port (an IPv6 address keeps its brackets); "" when it is no host name."""
    if not host or not set(host) <= _HOST_CHARACTERS:
        return ""
    if host.startswith("["):
        return host[: host.find("]") + 1] if "]" in host else ""
    return host.rpartition(":")[0] if ":" in host else host


def _bracketed(address: str) -> str:
    return f"[{address}]" if ":" in address else address
