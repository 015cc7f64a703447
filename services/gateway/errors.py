"""The gateway's domain errors and the one place they become gRPC statuses.

    GatewayError
    ├── InvalidArgumentError      a request or config that cannot be accepted
    ├── NotFoundError             an experiment or trial that does not exist
    ├── AlreadyExistsError
    ├── FailedPreconditionError   the state does not allow it (yet)
    ├── UnauthenticatedError      a token that does not verify
    ├── PermissionDeniedError     a principal acting outside its rights
    └── UnavailableError          a part the gateway stands on is down; retry later
        ├── EventLogUnavailableError      nats-server (appends, logs, contexts)
        └── ReadModelsUnavailableError    PostgreSQL (queries)
"""

import grpc


class GatewayError(Exception):
    code = grpc.StatusCode.INTERNAL


class InvalidArgumentError(GatewayError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class NotFoundError(GatewayError):
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExistsError(GatewayError):
    code = grpc.StatusCode.ALREADY_EXISTS


class FailedPreconditionError(GatewayError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class UnauthenticatedError(GatewayError):
    code = grpc.StatusCode.UNAUTHENTICATED


class PermissionDeniedError(GatewayError):
    code = grpc.StatusCode.PERMISSION_DENIED


class UnavailableError(GatewayError):
    code = grpc.StatusCode.UNAVAILABLE


class EventLogUnavailableError(UnavailableError):
    """The message names nats-server so the CLI can say which part is down."""


class ReadModelsUnavailableError(UnavailableError):
    """Queries wait for PostgreSQL; appends still work meanwhile."""


def status_for(error: GatewayError) -> tuple[grpc.StatusCode, str]:
    return error.code, str(error)
