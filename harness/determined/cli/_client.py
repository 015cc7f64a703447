"""The CLI's connection to the gateway.

grpc and the generated stubs are imported here, lazily, so that `det --help`
starts fast. Errors from the gateway become CliError at this one choke point,
and calls that meet a restarting master or a part of the cluster that is down
are made again for a while when that is safe (see _waiting).
"""

import argparse
import atexit
import contextlib
import itertools
import os
import queue
import re
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from determined.cli import _waiting
from determined.common.limits import MAX_MESSAGE_BYTES

DEFAULT_MASTER = "localhost:8080"
# Reconnect soon once a restarted gateway listens again (grpcio's default backoff grows to 120 s).
RECONNECT_OPTIONS = (
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2000),
)
# The RPCs the gateway answers without a session token.
UNAUTHENTICATED_METHODS = frozenset({"GetMaster", "Login"})
# The channel tells its state at once when asked; this is only a safety net.
STATE_WAIT_S = 1.0
# What grpcio says when the master's certificate is not trusted or does not name the host.
TLS_FAILURES = re.compile(r"handshake failed|verification check failed", re.IGNORECASE)
TLS_REFUSED = (
    "its TLS certificate is not trusted here or names another host: DET_MASTER_CERT_FILE names the "
    "certificate (or CA) to trust, DET_MASTER_CERT_NAME the name to check in it"
)

T = TypeVar("T")


class CliError(Exception):
    """Printed on stderr; the command exits 1. `code`: the name of the status the
    gateway refused the call with ("NOT_FOUND", "INVALID_ARGUMENT", ...), "" when
    the error is not the gateway's answer."""

    def __init__(self, message: str, code: str = "") -> None:
        super().__init__(message)
        self.code = code


class MasterUnavailableError(CliError):
    """The master did not answer (not running, or restarting), or answered that a part
    it stands on is down. `outage`: what is happening, when waiting may mend it ("" when
    it cannot: no cluster runs there); `never_sent`: the call never reached the master."""

    def __init__(self, message: str, code: str = "", *, outage: str = "", never_sent: bool = False) -> None:
        super().__init__(message, code)
        self.outage = outage
        self.never_sent = never_sent


def master_address(flag: str | None) -> str:
    """host:port of the gateway from -m/--master, DET_MASTER or the default
    (port 8080 when none is given), https://host:port when it says https (TLS, see
    determined._client.master_channel); CliError when the port is not one."""
    raw = flag or os.environ.get("DET_MASTER") or os.environ.get("DET_MASTER_ADDR") or DEFAULT_MASTER
    scheme, separator, rest = raw.partition("://")
    address = (rest if separator else raw).rstrip("/")
    if ":" not in address or address.endswith("]"):  # no port ("[::1]" has colons of its own)
        address += ":8080"
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise CliError(f"the master address {raw!r} is not host:port with a port from 1 to 65535")
    return f"https://{address}" if scheme.lower() == "https" and separator else address


def connect(args: argparse.Namespace) -> "Gateway":
    """The gateway of -m/--master, acting as the user of -u/--user (see _auth)."""
    return Gateway(master_address(args.master), user=args.user)


class Gateway:
    """A stub of the Determined gRPC service bound to one master address (as
    master_address gives it). Each call but GetMaster and Login carries the
    session token of `user` (see _auth for who acts when it is None), logged in
    on the first such call."""

    def __init__(
        self,
        address: str,
        user: str | None = None,
        password: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        import grpc

        from determined._client import MasterCertError, grpc_target, master_channel, uses_tls
        from determined.cli._auth import BearerToken, Session, TokenStore
        from determined.proto import api_pb2_grpc

        # host:port: tokens are cached per master whether it is reached by https:// or not.
        self.address = grpc_target(address)
        self.tls = uses_tls(address, os.environ if environ is None else environ)
        self._grpc = grpc
        try:
            self._channel = master_channel(
                address,
                [
                    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                    *RECONNECT_OPTIONS,
                ],
                environ,
            )
        except MasterCertError as error:
            raise CliError(str(error)) from None
        # Login and GetMe with a token of their own, on the channel without the session's.
        self.bare_stub = api_pb2_grpc.DeterminedStub(self._channel)  # type: ignore[no-untyped-call]
        self.session: Session = Session(
            TokenStore(self.address), self.login, self.token_valid, user, password
        )
        channel = grpc.intercept_channel(self._channel, BearerToken(self.session.token))
        self.stub = api_pb2_grpc.DeterminedStub(channel)  # type: ignore[no-untyped-call]
        # Closed before the interpreter tears down: a channel left to its finalizer after a
        # connectivity subscription (see _connected) can hang the exit.
        atexit.register(self._channel.close)
        # When the outage being waited out began (monotonic); None: the last call was answered.
        self._outage_since: float | None = None

    def login(self, user: str, hashed_password: str) -> str:
        """A new session of `user` (password as determined.common.passwords hashes it): its token."""
        from determined.proto import api_pb2

        request = api_pb2.LoginRequest(username=user, password=hashed_password, is_hashed=True)
        response: api_pb2.LoginResponse = self.call(self.bare_stub.Login, request)
        return str(response.token)

    def token_valid(self, token: str) -> bool:
        """Whether the gateway still takes `token` (GetMe answers with it)."""
        from determined.proto import api_pb2

        try:
            self.call(self.bare_stub.GetMe, api_pb2.GetMeRequest(), metadata=bearer(token))
        except CliError as refused:
            if refused.code == "UNAUTHENTICATED":
                return False
            raise
        return True

    def call(
        self,
        method: Callable[..., T],
        request: Any,
        timeout: float | None = 60.0,
        metadata: tuple[tuple[str, str], ...] | None = None,
    ) -> T:
        """One unary call, waited out while the master restarts or a part is down (see _waiting)."""
        repeatable = _waiting.safe_to_repeat(_waiting.rpc_name(request), request)
        return self.repeating(
            lambda: method(request, timeout=timeout, metadata=metadata), repeatable=repeatable
        )

    def stream(self, method: Callable[..., Iterator[T]], request: Any) -> Iterator[T]:
        """A server stream; an outage before its first answer is waited out as in call, one
        after it ends the stream with MasterUnavailableError (what came is not sent twice)."""
        repeatable = _waiting.safe_to_repeat(_waiting.rpc_name(request), request)
        responses = self.repeating(lambda: _started(method(request)), repeatable=repeatable)
        with self.answering():
            yield from responses

    def repeating(self, attempt: Callable[[], T], *, repeatable: bool) -> T:
        """`attempt()`, made again with backoff while the master restarts or a part of the
        cluster is down, for up to $DET_CLI_WAIT_S in all (see _waiting), when `repeatable`
        (safe to repeat) or the failed attempt never reached the master."""
        pauses = _waiting.pauses()
        while True:
            try:
                with self.answering():
                    result = attempt()
            except MasterUnavailableError as failure:
                self._wait_out(failure, repeatable, next(pauses))
                continue
            self._outage_since = None
            return result

    def _wait_out(self, failure: MasterUnavailableError, repeatable: bool, pause_s: float) -> None:
        """Sleeps `pause_s` when the failure is worth waiting out; raises what the user
        should read when it is not."""
        from determined.cli._output import notice

        try:
            budget_s = _waiting.wait_budget()
        except ValueError as bad:
            raise CliError(str(bad)) from None
        now = time.monotonic()
        waited_s = 0.0 if self._outage_since is None else now - self._outage_since
        repeatable = repeatable or failure.never_sent
        decision = _waiting.decide(failure.outage, repeatable, budget_s, waited_s, pause_s)
        if decision == "fail":
            raise failure
        if decision == "not_repeatable":
            raise CliError(_waiting.not_repeated(str(failure)), failure.code) from None
        if decision == "give_up":
            raise CliError(_waiting.gave_up(str(failure), budget_s), failure.code) from None
        if self._outage_since is None:
            self._outage_since = now
            notice(_waiting.waiting_line(failure.outage, budget_s))
        time.sleep(pause_s)

    @contextlib.contextmanager
    def answering(self) -> Iterator[None]:
        """Turns a gRPC error raised inside into a CliError for the user."""
        try:
            yield
        except self._grpc.RpcError as error:
            raise self._translate(error) from None

    def _translate(self, error: Any) -> CliError:
        code = error.code()
        if code != self._grpc.StatusCode.UNAVAILABLE:
            return CliError(error.details() or str(code), code.name)
        details = error.details() or ""
        if self._connected():
            # The gateway answered: a part it stands on (NATS, PostgreSQL) is down, and it says which.
            return MasterUnavailableError(
                details or "the master is unavailable; try again",
                code.name,
                outage=_waiting.part_down(self.address, details),
            )
        unreachable = f"could not reach the master at {self.address}"
        if TLS_FAILURES.search(details):
            return MasterUnavailableError(f"{unreachable}: {TLS_REFUSED}", code.name)
        from determined.cli._cluster_status import cluster_expected_up, read_local_cluster, unreachable_reason

        local = read_local_cluster(self.address)
        reason = unreachable_reason(self.address, local, self.tls)
        up = cluster_expected_up(self.address, local, self.tls)
        outage = _waiting.restarting(self.address, reason) if up else ""
        return MasterUnavailableError(
            f"{unreachable}: {reason}", code.name, outage=outage, never_sent=_waiting.never_sent(details)
        )

    def _connected(self) -> bool:
        """Whether the channel is connected to the gateway now (asked without
        trying to connect): an UNAVAILABLE it answered, not a refused connection."""
        states: queue.SimpleQueue[Any] = queue.SimpleQueue()
        tell = states.put
        self._channel.subscribe(tell, try_to_connect=False)
        try:
            state = states.get(timeout=STATE_WAIT_S)
        except queue.Empty:
            return False
        finally:
            self._channel.unsubscribe(tell)
        return bool(state == self._grpc.ChannelConnectivity.READY)


def _started(responses: Iterator[T]) -> Iterator[T]:
    """`responses` with its first answer already received (an error shows here)."""
    for first in responses:
        return itertools.chain([first], responses)
    return iter(())


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    """The metadata that makes a call act as the session of `token`."""
    return (("authorization", f"Bearer {token}"),)
