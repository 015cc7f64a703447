"""The CLI's connection to the gateway.

grpc and the generated stubs are imported here, lazily, so that `det --help`
starts fast. Errors from the gateway become CliError at this one choke point.
"""

import os
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

DEFAULT_MASTER = "localhost:8080"
MAX_MESSAGE_BYTES = 128 * 1024 * 1024
RETRY_INTERVAL_S = 0.5

T = TypeVar("T")


class CliError(Exception):
    """Printed on stderr; the command exits 1."""


class MasterUnavailableError(CliError):
    """The master did not answer (not running, or restarting)."""


def master_address(flag: str | None) -> str:
    """host:port of the gateway from -m/--master, DET_MASTER or the default."""
    raw = flag or os.environ.get("DET_MASTER") or os.environ.get("DET_MASTER_ADDR") or DEFAULT_MASTER
    address = raw.split("://", 1)[-1].rstrip("/")
    return address if ":" in address else f"{address}:8080"


class Gateway:
    """A stub of the Determined gRPC service bound to one master address."""

    def __init__(self, address: str) -> None:
        import grpc

        from determined.proto import api_pb2_grpc

        self.address = address
        self._grpc = grpc
        self._channel = grpc.insecure_channel(
            address,
            options=[
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ],
        )
        self.stub = api_pb2_grpc.DeterminedStub(self._channel)  # type: ignore[no-untyped-call]

    def call(self, method: Callable[..., T], request: Any, timeout: float | None = 60.0) -> T:
        try:
            return method(request, timeout=timeout)
        except self._grpc.RpcError as error:
            raise self._translate(error) from None

    def call_retrying(self, method: Callable[..., T], request: Any, for_s: float) -> T:
        """Like call, but retries for a while when the master does not answer:
        only for requests that are safe to repeat (they carry a request id)."""
        deadline = time.monotonic() + for_s
        while True:
            try:
                return self.call(method, request)
            except MasterUnavailableError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(RETRY_INTERVAL_S)

    def stream(self, method: Callable[..., Iterator[T]], request: Any) -> Iterator[T]:
        try:
            yield from method(request)
        except self._grpc.RpcError as error:
            raise self._translate(error) from None

    def _translate(self, error: Any) -> CliError:
        code = error.code()
        if code == self._grpc.StatusCode.UNAVAILABLE:
            return MasterUnavailableError(
                f"could not reach the master at {self.address}: is a cluster running? "
                "(start one with: det deploy local cluster-up)"
            )
        return CliError(error.details() or str(code))
