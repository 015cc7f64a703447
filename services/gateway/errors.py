"""The gateway's domain errors: plain exceptions, raised by the features'
commands and services, which know nothing of gRPC or HTTP. Each names its
kind (`Code`, the canonical status codes that gRPC and grpc-gateway share),
and each edge maps the kind once: grpc_status.py to a gRPC status (the
interceptor, auth.py), http/app.py to an HTTP status.

    GatewayError
    ├── InvalidArgumentError      a request or config that cannot be accepted
    ├── NotFoundError             an experiment or trial that does not exist
    ├── AlreadyExistsError
    ├── FailedPreconditionError   the state does not allow it (yet)
    ├── UnauthenticatedError      a token that does not verify
    ├── PermissionDeniedError     a principal acting outside its rights
    ├── ResourceExhaustedError    too many attempts: wait (login_limits.py)
    └── UnavailableError          a part the gateway stands on is down; retry later
        ├── EventLogUnavailableError      nats-server (appends, logs, contexts)
        └── ReadModelsUnavailableError    PostgreSQL (queries)

`as_gateway_error` is where errors of the layers below (nats-py) become these, so that a
nats-server outage answers UNAVAILABLE (callers retry) and an event over nats-server's
max_payload answers INVALID_ARGUMENT (never retried), rather than UNKNOWN.
"""

import enum

import nats.errors
import nats.js.errors

from services.common.connection import NatsUnavailableError


class Code(enum.IntEnum):
    """The kinds of refusal, numbered as google.rpc.Code (gRPC's status codes,
    and the `code` of grpc-gateway's JSON errors)."""

    INVALID_ARGUMENT = 3
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    INTERNAL = 13
    UNAVAILABLE = 14
    UNAUTHENTICATED = 16


class GatewayError(Exception):
    code = Code.INTERNAL


class InvalidArgumentError(GatewayError):
    code = Code.INVALID_ARGUMENT


class NotFoundError(GatewayError):
    code = Code.NOT_FOUND


class AlreadyExistsError(GatewayError):
    code = Code.ALREADY_EXISTS


class FailedPreconditionError(GatewayError):
    code = Code.FAILED_PRECONDITION


class UnauthenticatedError(GatewayError):
    code = Code.UNAUTHENTICATED


class PermissionDeniedError(GatewayError):
    code = Code.PERMISSION_DENIED


class UnavailableError(GatewayError):
    code = Code.UNAVAILABLE


class ResourceExhaustedError(GatewayError):
    code = Code.RESOURCE_EXHAUSTED


class EventLogUnavailableError(UnavailableError):
    """The message names nats-server so the CLI can say which part is down."""


class ReadModelsUnavailableError(UnavailableError):
    """Queries wait for PostgreSQL; appends still work meanwhile."""


# Said as they are by clients (the CLI names the part from them, and says how long it waits).
EVENT_LOG_UNAVAILABLE = "the event log (nats-server) is unavailable"
READ_MODELS_UNAVAILABLE = "read models unavailable (PostgreSQL is down)"
# nats-py's errors that mean nats-server (or its JetStream) cannot be reached right now.
_EVENT_LOG_DOWN = (
    NatsUnavailableError,
    nats.errors.TimeoutError,
    nats.errors.ConnectionClosedError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.ConnectionDrainingError,
    nats.errors.OutboundBufferLimitError,
    nats.errors.NoServersError,
    nats.errors.StaleConnectionError,
    nats.errors.FlushTimeoutError,
    nats.errors.NoRespondersError,
    nats.js.errors.NoStreamResponseError,
    nats.js.errors.ServiceUnavailableError,
)


def as_gateway_error(error: Exception) -> GatewayError | None:
    """The gateway error that `error` stands for; None for one no layer explains (a bug:
    left to answer UNKNOWN)."""
    if isinstance(error, GatewayError):
        return error
    if isinstance(error, nats.errors.MaxPayloadError):
        return InvalidArgumentError(
            "the event is too large for the event log (over nats-server's max_payload)"
        )
    if isinstance(error, _EVENT_LOG_DOWN):
        return EventLogUnavailableError(EVENT_LOG_UNAVAILABLE)
    return None
