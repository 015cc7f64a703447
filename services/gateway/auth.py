"""Who is calling: the one interceptor every RPC passes through.

A call with `x-allocation-token` metadata is a trial process: the token must
verify against the cluster secret (UNAUTHENTICATED otherwise) and is good for
its own trial only. Any other call is a user; until users exist that is
always the default user `determined` (an `authorization: Bearer ...` header is
accepted and ignored).

The interceptor also translates GatewayError (and the lower layers' errors
that `errors.as_gateway_error` explains) into the matching status, so that the
servicer raises domain errors and no handler calls `abort` itself.

An RPC that needs nats-server while it is down waits for it at most
EVENT_LOG_WAIT_S, then answers UNAVAILABLE naming nats-server; the
projector, which runs outside any RPC, waits for as long as the outage lasts.
"""

import contextlib
import contextvars
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import grpc

from services.common.connection import limit_outage_wait
from services.common.tokens import InvalidTokenError, verify_allocation_token
from services.gateway.errors import (
    GatewayError,
    PermissionDeniedError,
    UnauthenticatedError,
    as_gateway_error,
    status_for,
)

ALLOCATION_TOKEN = "x-allocation-token"
DEFAULT_USER = "determined"
EVENT_LOG_WAIT_S = 3.0


@dataclass(frozen=True)
class UserPrincipal:
    username: str

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


def authenticate(metadata: Mapping[str, str], secret: str) -> Principal:
    token = metadata.get(ALLOCATION_TOKEN)
    if token is None:
        return UserPrincipal(DEFAULT_USER)
    try:
        claims = verify_allocation_token(secret, token)
    except InvalidTokenError as error:
        raise UnauthenticatedError(str(error)) from error
    return TrialPrincipal(claims.trial_id, claims.allocation_id)


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
    def __init__(self, secret: str) -> None:
        self.secret = secret

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        metadata = {key: str(value) for key, value in handler_call_details.invocation_metadata or ()}
        try:
            principal: Principal | GatewayError = authenticate(metadata, self.secret)
        except UnauthenticatedError as error:
            principal = error
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                _unary(handler.unary_unary, principal),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.stream_unary is not None:  # UploadContext: the request is an iterator
            return grpc.stream_unary_rpc_method_handler(
                _unary(handler.stream_unary, principal),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                _stream(handler.unary_stream, principal),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler


def _unary(behavior: Callable[..., Any], principal: Principal | GatewayError) -> Callable[..., Any]:
    async def call(request: Any, context: grpc.aio.ServicerContext) -> Any:
        limit_outage_wait(EVENT_LOG_WAIT_S)  # the RPC's own task: its calls only
        try:
            with acting_as(_verified(principal)):
                return await behavior(request, context)
        except Exception as error:  # noqa: BLE001 - translated or re-raised by _abort
            await _abort(context, error)

    return call


def _stream(behavior: Callable[..., Any], principal: Principal | GatewayError) -> Callable[..., Any]:
    async def call(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        limit_outage_wait(EVENT_LOG_WAIT_S)
        try:
            _principal.set(_verified(principal))
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


def _verified(principal: Principal | GatewayError) -> Principal:
    if isinstance(principal, GatewayError):
        raise principal
    return principal
