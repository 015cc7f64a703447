"""The connection to nats-server, and how every part waits out its outages.

Each process holds one `Connection`. nats-py reconnects by itself; this adds
what it leaves out, so that an outage of any length costs time, nothing else:

- one log line when nats-server goes away and one when it is back (with how
  long it was gone), instead of the traceback per reconnect attempt that
  nats-py's default `error_cb` writes;
- backoff between reconnect attempts (`retry_delay`), capped at MAX_RETRY_S
  so that a part is back within that long of nats-server;
- `call`: one request to nats-server that waits the outage out. Services wait
  as long as it lasts; the gateway waits at most a few seconds per RPC
  (`limit_outage_wait`) and answers UNAVAILABLE.

What nats-py 2.16 does, verified against nats-server 2.15 (SIGKILL, restart
on the same store folder and port):

- With max_reconnect_attempts=-1, `connect()` retries the first connection
  for ever too, `reconnect_time_wait` apart: a part started while
  nats-server is down waits for it.
- Reconnect attempts are `reconnect_time_wait` apart, with no backoff, unless
  a `reconnect_to_server_handler` returns the delay (we use it).
- Every failed attempt goes to `error_cb`, and the end of the connection is
  reported there (UnexpectedEOF) before `disconnected_cb` runs; a write that
  fails first (a ping, a publish) may start the reconnection before either.
- A request in flight when the connection drops is neither failed nor sent
  again: it waits out its whole timeout. `call` races it against the loss.
- A publish made while reconnecting is buffered and sent once reconnected,
  even when its request timed out meanwhile: a retried append can reach the
  server twice, which its message id makes harmless.
- A restarted nats-server accepts clients only once JetStream has restored
  its streams: a request made after reconnecting finds every stream.
- An ordered push consumer recovers by itself: with no heartbeat for two
  idle_heartbeat periods it recreates its consumer from the last stream
  sequence it received + 1 (so resuming takes up to 2 × idle_heartbeat after
  the server is back). But when it had received nothing yet it starts over
  from sequence 1, not from the requested start: readers must drop what is
  below the sequence they expect (stream_reading.py's followers do).
- A login that nats-server refuses ("Authorization Violation") goes to
  `error_cb` like an outage and is tried again for ever. Waiting cannot help
  there: the process ends instead (NatsLoginRefusedError), saying why.
"""

import asyncio
import ssl
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any, TypeVar

import nats.errors
import nats.js.errors
import structlog
from nats.aio.client import Client as NatsClient
from nats.aio.client import Server
from nats.js.client import JetStreamContext

from services.common.settings import MasterCertificate, NatsCredentials, inbox_prefix

T = TypeVar("T")

FIRST_RETRY_S = 0.1
MAX_RETRY_S = 2.0
# Paces the attempts of the first connection (later ones: `retry_delay`).
FIRST_CONNECT_WAIT_S = 0.5
# How long a JetStream request waits for its answer (see Connection.jetstream).
REQUEST_TIMEOUT_S = 10.0
# A nats-server that stops answering without closing the connection (a
# stopped process, a lost network) is noticed after two unanswered pings.
PING_INTERVAL_S = 10

log = structlog.get_logger()

_outage_wait: ContextVar[float | None] = ContextVar("outage_wait", default=None)


class NatsUnavailableError(Exception):
    """nats-server stayed unreachable for as long as the caller would wait."""


class NatsLoginRefusedError(SystemExit):
    """nats-server refused this process's user: the process ends (exit status 1),
    with the reason as its last words, for the supervisor to show."""


class _ConnectionLost(Exception):
    """The connection dropped while a request was in flight."""


# What a request raises when nats-server (or its JetStream) cannot be reached.
OUTAGE_ERRORS: tuple[type[Exception], ...] = (
    _ConnectionLost,
    OSError,
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    nats.errors.OutboundBufferLimitError,
    nats.errors.StaleConnectionError,
    nats.errors.ConnectionReconnectingError,
    nats.js.errors.NoStreamResponseError,
    nats.js.errors.ServiceUnavailableError,
)


def retry_delay(attempt: int) -> float:
    """How long to wait before retry number `attempt` (0 for the first)."""
    return min(FIRST_RETRY_S * 2.0 ** min(attempt, 16), MAX_RETRY_S)


def limit_outage_wait(seconds: float) -> None:
    """From here on in this task (and the tasks it starts), a call that finds
    nats-server unreachable gives up after `seconds` with NatsUnavailableError.
    The gateway sets it in each RPC, to answer UNAVAILABLE rather than hang;
    services never do: they wait out an outage of any length."""
    _outage_wait.set(seconds)


def request_timeout(default: float) -> float:
    """A request's timeout: `default`, or the caller's outage wait if shorter."""
    wait = _outage_wait.get()
    return default if wait is None else min(default, wait)


class Connection:
    """One connection to nats-server that knows whether it is up (nats-py's
    callbacks tell it) and says so in the log once per change."""

    def __init__(self, url: str, user: str = "") -> None:
        self.url = url
        self.user = user
        self.nc = NatsClient()
        self._up = asyncio.Event()
        # Resolved when the connection drops; a new one each time it is back.
        self._lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._down_since = time.monotonic()
        self._said_down = False
        # Set once the first connection is made: a refusal after it is a reconnection's.
        self._opened = False
        self._refusal_raised = False

    @classmethod
    async def open(cls, url: str, name: str = "", credentials: NatsCredentials | None = None) -> "Connection":
        """Connects, waiting for nats-server for as long as it takes, as the user
        `credentials` names (default: the process's DET_NATS_USER, if any)."""
        login = credentials if credentials is not None else NatsCredentials()
        connection = cls(url, login.user)
        try:
            await connection._connect(name, login)
        except NatsLoginRefusedError:
            await connection.nc.close()
            raise
        connection._opened = True
        connection._came_back("nats_connected")
        return connection

    async def _connect(self, name: str, login: NatsCredentials) -> None:
        await self.nc.connect(
            self.url,
            name=name or None,
            **_login(login),
            **_tls(MasterCertificate()),
            max_reconnect_attempts=-1,
            reconnect_time_wait=FIRST_CONNECT_WAIT_S,  # type: ignore[arg-type]  # a float works
            reconnect_to_server_handler=_next_attempt,
            ping_interval=PING_INTERVAL_S,
            error_cb=self._error,
            disconnected_cb=self._disconnected,
            reconnected_cb=self._reconnected,
        )

    def jetstream(self) -> JetStreamContext:
        """JetStream on this connection. Its requests time out after
        REQUEST_TIMEOUT_S, or sooner where the caller's outage wait is shorter
        (an RPC's): a request made outside `call` also answers within that wait."""
        return self.nc.jetstream(timeout=request_timeout(REQUEST_TIMEOUT_S))

    async def close(self) -> None:
        if self.nc.is_connected:
            await self.nc.drain()
        else:
            await self.nc.close()

    async def call(self, request: Callable[[], Awaitable[T]]) -> T:
        """`request()`'s answer, waiting out an outage of nats-server: an
        attempt is made only while connected, and one cut short by an outage
        (the connection dropped, a timeout, JetStream not answering) is made
        again, with backoff. Raises NatsUnavailableError once the caller's wait
        (`limit_outage_wait`) is over; any other error as it is."""
        wait = _outage_wait.get()
        deadline = None if wait is None else time.monotonic() + wait
        attempt = 0
        while True:
            await self._wait_until_up(deadline)
            try:
                return await self._unless_lost(request())
            except OUTAGE_ERRORS as error:
                delay = retry_delay(attempt)
                if deadline is not None and time.monotonic() + delay > deadline:
                    raise NatsUnavailableError(f"nats-server did not answer: {error!r}") from error
                log.debug("nats_request_retried", error=repr(error), attempt=attempt + 1)
            await asyncio.sleep(delay)
            attempt += 1

    async def _wait_until_up(self, deadline: float | None) -> None:
        if self.nc.is_closed:
            raise nats.errors.ConnectionClosedError
        if deadline is None:
            await self._up.wait()
            return
        try:
            async with asyncio.timeout(max(deadline - time.monotonic(), 0.0)):
                await self._up.wait()
        except TimeoutError:
            raise NatsUnavailableError(f"nats-server at {self.url} is unreachable") from None

    async def _unless_lost(self, request: Awaitable[T]) -> T:
        task = asyncio.ensure_future(request)
        try:
            await asyncio.wait((task, self._lost), return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            task.cancel()
            raise
        if not task.done():
            task.cancel()
            raise _ConnectionLost
        return task.result()

    # -- nats-py's callbacks ------------------------------------------------------

    async def _error(self, error: Exception) -> None:
        """The outage is told by one line when it starts and one when it ends;
        what goes wrong in between is part of it. A refused login ends the
        process, whether at the first connection or at a reconnection."""
        if _login_refused(error):
            self._end_refused()
            return
        if isinstance(error, OUTAGE_ERRORS):
            if not self.nc.is_connected and not self.nc.is_closed:
                self._went_down()
            log.debug("nats_error", error=repr(error))
        else:
            log.warning("nats_error", error=str(error))

    async def _disconnected(self) -> None:
        if not self.nc.is_closed:
            self._went_down()

    async def _reconnected(self) -> None:
        self._came_back("nats_reconnected")

    def _end_refused(self) -> None:
        """At the first connection the refusal ends `open` (the caller's task). At a
        reconnection this runs in nats-py's reconnecting task: raised there, the exit
        would also leave that task failed, which asyncio prints as a traceback when the
        process ends; raised from a plain callback of the loop, it ends the process with
        the message alone."""
        if not self._opened:
            raise self._refused()
        if not self._refusal_raised:
            self._refusal_raised = True
            asyncio.get_running_loop().call_soon(_raise, self._refused())

    def _refused(self) -> NatsLoginRefusedError:
        reason = (
            f"nats-server at {self.url} refused the login of user {self.user or '(none)'!r}: its password "
            "(DET_NATS_USER/DET_NATS_PASSWORD, which a local cluster sets from <data dir>/credentials.json) "
            "does not match nats-server's configuration"
        )
        log.error("nats_login_refused", url=self.url, user=self.user, reason=reason)
        return NatsLoginRefusedError(reason)

    def _went_down(self) -> None:
        """Says the outage once: `nats_disconnected` when the connection was up,
        `nats_unavailable` when it never came up. Which of nats-py's callbacks
        notices first varies (a failed write can start the reconnection before
        the read loop reports the end of the connection), so the name depends on
        the state, not on the callback."""
        event = "nats_disconnected" if self._up.is_set() else "nats_unavailable"
        if self._up.is_set():
            self._up.clear()
            self._lost.set_result(None)
            self._down_since = time.monotonic()
        if not self._said_down:
            self._said_down = True
            log.warning(event, url=self.url, action="waiting for nats-server; retrying with backoff")

    def _came_back(self, event: str) -> None:
        if self._said_down:
            log.info(event, url=self.url, outage_s=round(time.monotonic() - self._down_since, 1))
            self._said_down = False
        self._lost = asyncio.get_running_loop().create_future()
        self._up.set()


def _raise(error: BaseException) -> None:
    raise error


def _login_refused(error: Exception) -> bool:
    """nats-py reports a refused login as AuthorizationError on an open connection,
    and as a plain Error with nats-server's words while connecting."""
    return (
        isinstance(error, nats.errors.AuthorizationError) or "authorization violation" in str(error).lower()
    )


def _login(credentials: NatsCredentials) -> dict[str, Any]:
    """nats-py's connect arguments for the user: its password, and inboxes under
    its `inbox_prefix`, the only ones its permissions let it subscribe to."""
    if not credentials.user:
        return {}
    return {
        "user": credentials.user,
        "password": credentials.password.get_secret_value(),
        "inbox_prefix": inbox_prefix(credentials.user),
    }


def _tls(certificate: MasterCertificate) -> dict[str, Any]:
    """nats-py's TLS arguments, used when nats-server requires TLS (cluster-up --tls-cert
    with agents on other machines): trust the cluster's certificate, check its name."""
    options: dict[str, Any] = {}
    if certificate.file:
        options["tls"] = ssl.create_default_context(cafile=certificate.file)
    if certificate.name:
        options["tls_hostname"] = certificate.name
    return options


def _next_attempt(servers: list[Server], info: dict[str, Any]) -> tuple[Server | None, float]:
    """nats-py's reconnect_to_server_handler: the first server of its pool
    (None), after a delay that grows with the failed attempts."""
    return None, retry_delay(servers[0].reconnects if servers else 0)
