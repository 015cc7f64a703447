"""The gRPC edge of the domain errors (errors.py): the one place a refusal
becomes a gRPC status, used by the interceptor (auth.py) for every RPC."""

import grpc

from services.gateway.errors import GatewayError


def status_for(error: GatewayError) -> tuple[grpc.StatusCode, str]:
    """The status and details a call refused with `error` ends with."""
    return grpc.StatusCode[error.code.name], str(error)
