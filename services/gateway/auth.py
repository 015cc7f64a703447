"""Who is calling: the one interceptor every RPC passes through.

A call with `x-allocation-token` metadata is a trial process: the token must
verify against the cluster secret (UNAUTHENTICATED otherwise), and it is good
only for the calls a trial process makes (TRIAL_RPCS: any other RPC, public
ones too, is PERMISSION_DENIED), for its own trial only, and only while its
allocation is open (each of those functions checks both: the reports'
fencing, features/trials/reports.py). The token is no user: it sits in trial
code's environment, where careless scripts print it. Any other call is a user, named by the session
token of its login (`authorization: Bearer <token>`, from Login): the token must
verify, be unexpired, and its session must be good in the directory (not
ended, the user active, the password unchanged since). Without a token a call
is UNAUTHENTICATED, unless the gateway allows anonymous calls
(DET_ALLOW_ANONYMOUS, for tests only): they act as `determined`. Login and
GetMaster need no token.

The check reads the in-memory directory (features/users/directory.py): a few
microseconds. A well-signed token whose session this gateway does not know
yet (a login a moment ago through another gateway) gets one more look once
the directory has caught up with the log.

The interceptor also translates GatewayError (and the lower layers' errors
that `errors.as_gateway_error` explains) into the matching status, so that the
servicer raises domain errors and no handler calls `abort` itself.

An RPC that needs nats-server while it is down waits for it at most
EVENT_LOG_WAIT_S, then answers UNAVAILABLE naming nats-server; the
projector, which runs outside any RPC, waits for as long as the outage lasts.
"""

import contextlib
import contextvars
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import grpc

from services.common.connection import limit_outage_wait
from services.common.tokens import InvalidTokenError, verify_allocation_token, verify_session_token
from services.gateway.errors import PermissionDeniedError, UnauthenticatedError, as_gateway_error
from services.gateway.features.users.accounts import (
    DEFAULT_USER,
    LOGIN_HINT,
    SessionRefusedError,
    UnknownSessionError,
    User,
)
from services.gateway.features.users.directory import UserDirectory
from services.gateway.grpc_status import status_for

ALLOCATION_TOKEN = "x-allocation-token"
AUTHORIZATION = "authorization"
BEARER = "Bearer "
EVENT_LOG_WAIT_S = 3.0
# The RPCs answered without a token (by their name in the service).
PUBLIC_RPCS = frozenset({"Login", "GetMaster"})
# The calls a trial process makes (harness/determined/_client.py's TrialClient,
# for core_context's metrics, checkpoints, searcher, preemption and metadata),
# and the only ones an allocation token is good for. Each handler checks that
# the request names the token's own trial (or allocation) and that the
# allocation is open. The HTTP API has none (http/app.py refuses the token).
TRIAL_RPCS = frozenset(
    {
        "ReportMetrics",
        "ReportProgress",
        "ReportCheckpoint",
        "ReportStatus",
        "ReportEarlyExit",
        "SetTrialMetadata",
        "GetTrialMetadata",
        "GetBestValidation",
        "WatchAllocation",
        "AcknowledgeStop",
        "DeleteCheckpoints",
        "ReportCheckpointUse",
    }
)


@dataclass(frozen=True)
class UserPrincipal:
    username: str
    user_id: int = 0
    admin: bool = False
    # The login the call's token names ("" for an anonymous call).
    session_id: str = ""

    @property
    def actor(self) -> str:
        return f"user:{self.username}"


@dataclass(frozen=True)
class TrialPrincipal:
    trial_id: int
    allocation_id: str

    @property
    def actor(self) -> str:
        return f"trial:{self.trial_id}"


Principal = UserPrincipal | TrialPrincipal

_principal: contextvars.ContextVar[Principal] = contextvars.ContextVar("principal")


class Authenticator:
    """Says who a call's metadata (or HTTP headers, lower-cased) names."""

    def __init__(self, secret: str, directory: UserDirectory, *, allow_anonymous: bool = False) -> None:
        self.secret = secret
        self.directory = directory
        self.allow_anonymous = allow_anonymous

    async def authenticate(self, metadata: Mapping[str, str]) -> Principal:
        """The caller; UnauthenticatedError when no token or a bad one names it."""
        token = metadata.get(ALLOCATION_TOKEN)
        if token is not None:
            try:
                allocation = verify_allocation_token(self.secret, token)
            except InvalidTokenError as error:
                raise UnauthenticatedError(str(error)) from error
            return TrialPrincipal(allocation.trial_id, allocation.allocation_id)
        authorization = metadata.get(AUTHORIZATION, "")
        if not authorization:
            return self._anonymous()
        if not authorization.startswith(BEARER):
            raise UnauthenticatedError(f"the authorization is not a bearer token; {LOGIN_HINT}")
        try:
            claims = verify_session_token(self.secret, authorization[len(BEARER) :])
        except InvalidTokenError as error:
            if self._is_allocation_token(authorization[len(BEARER) :]):
                refusal = f"an allocation token is not a user's session token; {LOGIN_HINT}"
                raise UnauthenticatedError(refusal) from error
            raise UnauthenticatedError(f"{error}; {LOGIN_HINT}") from error
        try:
            try:
                user = self._session_user(claims.user_id, claims.session_id, claims.expires_at_ns)
            except UnknownSessionError:
                await self.directory.catch_up()  # a login a moment ago, through another gateway
                user = self._session_user(claims.user_id, claims.session_id, claims.expires_at_ns)
        except SessionRefusedError as error:
            raise UnauthenticatedError(f"not logged in: {error}; {LOGIN_HINT}") from error
        return principal_of(user, claims.session_id)

    def _is_allocation_token(self, token: str) -> bool:
        try:
            verify_allocation_token(self.secret, token)
        except InvalidTokenError:
            return False
        return True

    def _session_user(self, user_id: int, session_id: str, expires_at_ns: int) -> User:
        return self.directory.current.session_user(user_id, session_id, expires_at_ns, time.time_ns())

    def _anonymous(self) -> UserPrincipal:
        if not self.allow_anonymous:
            raise UnauthenticatedError(f"not logged in; {LOGIN_HINT}")
        user = self.directory.current.by_name(DEFAULT_USER)
        if user is None or not user.active:
            raise UnauthenticatedError(f"the user {DEFAULT_USER} is not active; {LOGIN_HINT}")
        return principal_of(user, "")


def check_trial_call(rpc: str, principal: TrialPrincipal) -> None:
    """An allocation token is good for TRIAL_RPCS only."""
    if rpc not in TRIAL_RPCS:
        raise PermissionDeniedError(
            f"an allocation token (trial {principal.trial_id}'s) is good only for a trial process's own calls"
            f" ({', '.join(sorted(TRIAL_RPCS))}), not for {rpc}; a user calls it with their login (det user login)"
        )


def principal_of(user: User, session_id: str) -> UserPrincipal:
    return UserPrincipal(user.username, user.user_id, user.admin, session_id)


@contextlib.contextmanager
def acting_as(principal: Principal) -> Iterator[Principal]:
    """Makes `principal` the caller of the code inside the block."""
    token = _principal.set(principal)
    try:
        yield principal
    finally:
        _principal.reset(token)


def current_principal() -> Principal:
    return _principal.get()


def require_trial(trial_id: int) -> TrialPrincipal:
    """The calling trial process, which must be the one for `trial_id`."""
    principal = _trial_process()
    if principal.trial_id != trial_id:
        raise PermissionDeniedError(
            f"the allocation token is for trial {principal.trial_id}, not trial {trial_id}"
        )
    return principal


def require_allocation(allocation_id: str) -> TrialPrincipal:
    """The calling trial process, which must be one of allocation `allocation_id`."""
    principal = _trial_process()
    if principal.allocation_id != allocation_id:
        raise PermissionDeniedError(
            f"the allocation token is for allocation {principal.allocation_id}, not {allocation_id or '(none)'}"
        )
    return principal


def require_admin(what: str) -> UserPrincipal:
    """The calling user, who must be an admin to do `what`."""
    user = require_user()
    if not user.admin:
        raise PermissionDeniedError(f"{what} needs an admin; {user.username} is not one")
    return user


def require_user() -> UserPrincipal:
    """The calling user: a trial process may not do what only users do
    (change a GC policy, delete an experiment, edit the model registry)."""
    principal = current_principal()
    if not isinstance(principal, UserPrincipal):
        raise PermissionDeniedError(f"only a user may do this, not {principal.actor}'s process")
    return principal


def _trial_process() -> TrialPrincipal:
    principal = current_principal()
    if not isinstance(principal, TrialPrincipal):
        raise PermissionDeniedError("only a trial process (allocation token) may report for a trial")
    return principal


class AuthInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]  # grpc is untyped
    def __init__(self, authenticator: Authenticator) -> None:
        self.authenticator = authenticator

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        metadata = {key: str(value) for key, value in handler_call_details.invocation_metadata or ()}
        caller = _Caller(self.authenticator, metadata, handler_call_details.method.rpartition("/")[2])
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                _unary(handler.unary_unary, caller),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.stream_unary is not None:  # UploadContext: the request is an iterator
            return grpc.stream_unary_rpc_method_handler(
                _unary(handler.stream_unary, caller),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                _stream(handler.unary_stream, caller),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler


@dataclass(frozen=True)
class _Caller:
    """Who makes one call, found out inside the call's own task (where an
    outage of nats-server is waited on for EVENT_LOG_WAIT_S at most)."""

    authenticator: Authenticator
    metadata: dict[str, str]
    rpc: str

    async def enter(self) -> None:
        """Makes the call's principal current (a public RPC needs none, but
        is refused to an allocation token as any call outside TRIAL_RPCS)."""
        if self.rpc in PUBLIC_RPCS and ALLOCATION_TOKEN not in self.metadata:
            return
        principal = await self.authenticator.authenticate(self.metadata)
        if isinstance(principal, TrialPrincipal):
            check_trial_call(self.rpc, principal)
        _principal.set(principal)


def _unary(behavior: Callable[..., Any], caller: _Caller) -> Callable[..., Any]:
    async def call(request: Any, context: grpc.aio.ServicerContext) -> Any:
        limit_outage_wait(EVENT_LOG_WAIT_S)  # the RPC's own task: its calls only
        try:
            await caller.enter()
            return await behavior(request, context)
        except Exception as error:  # noqa: BLE001 - translated or re-raised by _abort
            await _abort(context, error)

    return call


def _stream(behavior: Callable[..., Any], caller: _Caller) -> Callable[..., Any]:
    async def call(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        limit_outage_wait(EVENT_LOG_WAIT_S)
        try:
            await caller.enter()
            async for response in behavior(request, context):
                yield response
        except Exception as error:  # noqa: BLE001 - translated or re-raised by _abort
            await _abort(context, error)

    return call


async def _abort(context: grpc.aio.ServicerContext, error: Exception) -> None:
    """End the call with the status `error` stands for; re-raise one that stands for none."""
    gateway_error = as_gateway_error(error)
    if gateway_error is None:
        raise error
    await context.abort(*status_for(gateway_error))
