"""What the gateway's proxy (proxy.py) forwards to a task's server and what
it refuses: pure rules over headers, addresses and the task's read model.

A task's server (JupyterLab, TensorBoard, sshd) is untrusted like trial code:
it never sees the user's credentials (their `Authorization` header, the
gateway's session cookie), only the token the gateway signs for that task
(services/common/tokens.py's task_proxy_token), and it may not set the
gateway's session cookie in the browser.
"""

from collections.abc import Iterable
from urllib.parse import urlsplit

from services.gateway.errors import UnavailableError
from services.gateway.features.tasks.queries import ProxyTarget
from services.gateway.http.app import SESSION_COOKIE

Headers = list[tuple[bytes, bytes]]

# Meaningful for one connection only (RFC 9110 §7.6.1), so never passed on;
# with those a `Connection` header names.
HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    }
)
# The WebSocket handshake's own headers: the proxy makes its own handshake with the task.
WEBSOCKET_HANDSHAKE = frozenset(
    {
        b"sec-websocket-key",
        b"sec-websocket-version",
        b"sec-websocket-extensions",
        b"sec-websocket-protocol",
        b"sec-websocket-accept",
    }
)
# A task's server may not send these to the browser: a service worker's scope wider than its
# own folder (it would serve the pages of every task the browser opens), and the order to
# clear the site's data (the gateway's login cookie with it).
REACHING_BEYOND_THE_TASK = frozenset({b"service-worker-allowed", b"clear-site-data"})
# Set by the proxy itself (the client's own are replaced; X-Forwarded-For is extended).
FORWARDED = frozenset({b"x-forwarded-proto", b"x-forwarded-host"})
# Close codes a close frame may carry (RFC 6455 §7.4; 1005, 1006 and 1015 only say what happened).
_SENDABLE_CLOSE_CODES = frozenset({*range(1000, 1004), *range(1007, 1015), *range(3000, 5000)})
CLOSE_NORMAL = 1000
CLOSE_GOING_AWAY = 1001
CLOSE_UNSUPPORTED_DATA = 1003
CLOSE_INTERNAL_ERROR = 1011


class TaskUnreachableError(UnavailableError):
    """The task's server cannot answer: not ready, ended, refused or too slow (HTTP 502)."""


def not_ready(target: ProxyTarget) -> TaskUnreachableError:
    """Why a task with no address cannot answer: how it stands, or how it ended."""
    if target.exit_summary:
        how = f"has ended ({target.state}): {target.exit_summary}"
    elif target.task_type == "COMMAND":
        how = f"runs no server to open (it is {target.state})"
    else:
        how = f"is not ready yet (it is {target.state}); try again once it is RUNNING"
    return TaskUnreachableError(f"{named(target)} {how}")


def named(target: ProxyTarget) -> str:
    return f"{target.task_type.lower()} {target.task_id}"


def unreachable(target: ProxyTarget, why: str) -> TaskUnreachableError:
    return TaskUnreachableError(
        f"{named(target)} ({target.state}) did not answer at {target.proxy_address}: {why}"
    )


def address(proxy_address: str) -> tuple[str, int]:
    """`host:port` (or `[v6 address]:port`) as a host and a port; ValueError when it is neither."""
    host, _, port = proxy_address.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"not a host:port address: {proxy_address!r}")
    return host, int(port)


def request_headers(headers: Headers, *, client: str, scheme: str, task_token: str) -> Headers:
    """The headers sent on to the task: the client's, less hop-by-hop ones,
    its credentials and the gateway's session cookie; with the task's own
    token and X-Forwarded-For (extended), -Proto and -Host. `Host` stays the
    client's, as a reverse proxy's usually does, so the server's own origin
    checks see the address the browser used."""
    dropped = _connection_named(headers) | HOP_BY_HOP | WEBSOCKET_HANDSHAKE | FORWARDED | {b"authorization"}
    kept: Headers = []
    forwarded_for: list[bytes] = []
    host = b""
    for name, value in headers:
        if name == b"x-forwarded-for":
            forwarded_for.append(value)
        elif name == b"cookie":
            cookie = without_session_cookie(value)
            if cookie:
                kept.append((name, cookie))
        elif name not in dropped:
            kept.append((name, value))
        if name == b"host":
            host = value
    kept.append((b"authorization", f"token {task_token}".encode()))
    if client:
        forwarded_for.append(client.encode("latin-1"))
    if forwarded_for:
        kept.append((b"x-forwarded-for", b", ".join(forwarded_for)))
    kept.append((b"x-forwarded-proto", scheme.encode()))
    if host:
        kept.append((b"x-forwarded-host", host))
    return kept


def response_headers(headers: Iterable[tuple[bytes, bytes]]) -> Headers:
    """The task's answer's headers passed to the client: less hop-by-hop
    ones and those REACHING_BEYOND_THE_TASK, and never a cookie named as the
    gateway's session cookie."""
    listed = [(name.lower(), value) for name, value in headers]
    dropped = _connection_named(listed) | HOP_BY_HOP | REACHING_BEYOND_THE_TASK
    return [
        (name, value)
        for name, value in listed
        if name not in dropped and not (name == b"set-cookie" and _sets_session_cookie(value))
    ]


def without_session_cookie(cookie: bytes) -> bytes:
    """A Cookie header's value less the gateway's session cookie ("" when nothing else is left)."""
    pairs = [pair.strip() for pair in cookie.split(b";")]
    return b"; ".join(pair for pair in pairs if pair and _cookie_name(pair) != SESSION_COOKIE.encode())


def cross_origin(origin: str | None, host: str | None) -> bool:
    """Whether a browser's request comes from a page of another origin than
    the gateway's (its Origin's host:port is not the Host it asked): such a
    request may not ride on the session cookie. No Origin: a plain
    navigation, which SameSite=Strict already keeps to the gateway's own pages."""
    if origin is None:
        return False
    netloc = urlsplit(origin).netloc if origin != "null" else ""
    return not netloc or netloc.lower() != (host or "").lower()


def sendable_close_code(code: int | None, *, otherwise: int) -> int:
    """The close code to pass on: the one received, or `otherwise` when a
    close frame cannot carry it (none came, or the connection dropped)."""
    return code if code is not None and code in _SENDABLE_CLOSE_CODES else otherwise


def _connection_named(headers: Iterable[tuple[bytes, bytes]]) -> set[bytes]:
    """The headers a `Connection` header names (hop-by-hop too)."""
    return {
        token.strip().lower()
        for name, value in headers
        if name.lower() == b"connection"
        for token in value.split(b",")
        if token.strip()
    }


def _sets_session_cookie(set_cookie: bytes) -> bool:
    return _cookie_name(set_cookie.split(b";", 1)[0].strip()) == SESSION_COOKIE.encode()


def _cookie_name(pair: bytes) -> bytes:
    return pair.split(b"=", 1)[0].strip()
