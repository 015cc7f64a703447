"""Uploading a context folder: the tar.gz is built while it is sent
(UploadContext, a stream of chunks), so the CLI's memory does not grow with
the folder; the gateway answers with the archive's hash, which
CreateExperiment then names.

The last request names the hash of everything sent: the gateway keeps an
upload only then. A file that changes while it is packed (deleted, or shorter
than when it was listed) cancels the upload instead, so that the gateway
keeps nothing of it, and the user is told which file it was.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from determined.cli._client import CliError, Gateway

if TYPE_CHECKING:
    from determined.common.context import ContextFiles


def upload_context(gateway: Gateway, files: ContextFiles) -> str:
    """Uploads the archive of `files`; returns its hash. Starts again (the
    archive is the same bytes, stored by its hash) while the master restarts
    or a part of the cluster is down, as Gateway.repeating waits."""
    return gateway.repeating(lambda: _upload_once(gateway, files), repeatable=True)


def _upload_once(gateway: Gateway, files: ContextFiles) -> str:
    import grpc

    requests = _Requests(files.archive_chunks())
    call = gateway.stub.UploadContext.future(requests)
    requests.started(call)
    try:
        with gateway.answering():
            response = call.result()
    except grpc.FutureCancelledError:
        response = None
    if requests.failure is not None:
        raise CliError(f"the context folder changed while it was uploaded: {requests.failure}")
    if response is None:
        raise CliError("the context upload was canceled")
    return str(response.context_hash)


class _Requests:
    """The UploadContextRequests of one upload, read by gRPC's sending
    thread; a packing failure is kept and cancels the call instead of
    raising into gRPC (which would log a traceback)."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._call: Any = None
        self._started = threading.Event()
        self._sha = hashlib.sha256()
        self._ended = False
        self.failure: Exception | None = None

    def started(self, call: Any) -> None:
        self._call = call
        self._started.set()

    def __iter__(self) -> _Requests:
        return self

    def __next__(self) -> Any:
        from determined.common.context import ContextError
        from determined.proto import api_pb2

        self._started.wait()
        if self._ended:
            raise StopIteration
        try:
            chunk = next(self._chunks)
        except StopIteration:  # the last request: the gateway keeps the archive only with it
            self._ended = True
            return api_pb2.UploadContextRequest(context_hash=self._sha.hexdigest())
        except (ContextError, OSError) as failure:
            self.failure = failure
            self._call.cancel()
            raise StopIteration from None
        self._sha.update(chunk)
        return api_pb2.UploadContextRequest(chunk=chunk)
