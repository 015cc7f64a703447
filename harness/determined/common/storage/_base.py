"""The interface every backend implements (contract for the harness and the
checkpoint service; see the package docstring)."""

import abc
import pathlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

# The chunks `read` yields unless asked otherwise.
READ_CHUNK_BYTES = 1 << 20

# relpath -> bool: which files of a checkpoint to download or upload.
Selector = Callable[[str], bool]


class StorageError(Exception):
    """The storage refused or failed an operation; the message names the backend's error."""


@dataclass(frozen=True)
class DeleteResult:
    """What deleting a checkpoint's files left: `remaining` relpath -> size (empty: fully
    deleted), `errors` the storage's error for each file it could not delete, and the bytes freed."""

    remaining: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    bytes_freed: int = 0


class StorageManager(abc.ABC):
    @abc.abstractmethod
    def upload(self, src: pathlib.Path, storage_id: str, *, paths: list[str] | None = None) -> None:
        """Copy the files of local folder `src` (only `paths`, relative, when given) to the checkpoint."""

    @abc.abstractmethod
    def download(self, storage_id: str, dst: pathlib.Path, *, selector: Selector | None = None) -> None:
        """Copy the checkpoint's files (those `selector` accepts) into local folder `dst`.
        FileNotFoundError when the checkpoint does not exist."""

    @abc.abstractmethod
    def delete(self, storage_id: str, globs: list[str] | None = None) -> DeleteResult:
        """Delete the checkpoint's files (those matching `globs`, all when None or empty).
        Idempotent: files already gone count as deleted. Never raises for one file's
        failure: it is reported in the result. StorageError when the checkpoint cannot even
        be listed (the storage is unreachable, the bucket is gone)."""

    @abc.abstractmethod
    def list_resources(self, storage_id: str) -> dict[str, int]:
        """{relpath: size} of the checkpoint's files as stored now ({} when none)."""

    @abc.abstractmethod
    def read(
        self, storage_id: str, relpath: str, offset: int = 0, chunk_bytes: int = READ_CHUNK_BYTES
    ) -> Iterator[bytes]:
        """One file's bytes from `offset` on, in chunks of at most `chunk_bytes` (the gateway's
        download stream; nothing past the end). Raised by the call itself, before any chunk:
        FileNotFoundError when the file does not exist, ValueError for a path that is not
        inside a checkpoint."""

    @abc.abstractmethod
    def within(self, folder: str) -> "StorageManager":
        """The same storage rooted at its sub-folder `folder` (relative, checked as a
        checkpoint's path is): for files kept beside the checkpoints, as TensorBoard's
        `tensorboard/experiment/<experiment id>/`, where each trial's folder is then handled
        as a checkpoint named by the trial id."""

    def local_path(self, storage_id: str) -> pathlib.Path | None:
        """The checkpoint's folder when the backend is a local file system (no copy needed)."""
        return None
