"""Cloud storage (s3, gcs, azure): a checkpoint is the objects under
`<prefix>/<storage_id>/`, one per file, a folder as an empty object named `dir/`.

Each cloud backend is a small `ObjectStore` (list, put, get, delete, read a range of
objects with its library); `ObjectStorageManager` does the rest, the same for all, moving
many files at once on a pool of threads (the libraries' clients are thread-safe)."""

import abc
import concurrent.futures
import pathlib
from collections.abc import Callable, Iterable, Iterator

from determined.common.storage._base import READ_CHUNK_BYTES, DeleteResult, Selector, StorageManager
from determined.common.storage._paths import (
    check_range,
    check_relpath,
    check_storage_id,
    local_resources,
    to_delete,
)

# Files in flight at once: small checkpoint files are latency-bound, not bandwidth-bound.
TRANSFER_THREADS = 16


class ObjectStore(abc.ABC):
    """One bucket (or container) of a cloud storage. Every method raises StorageError
    naming the library's error, FileNotFoundError for a missing object where it says so."""

    url: str  # for messages: s3://bucket, gs://bucket, azure://container

    @abc.abstractmethod
    def list_objects(self, prefix: str) -> dict[str, int]:
        """{key: size} of every object whose key starts with `prefix`."""

    @abc.abstractmethod
    def put(self, key: str, path: pathlib.Path | None) -> None:
        """Store local file `path` as object `key`; None: an empty object (a folder)."""

    @abc.abstractmethod
    def get(self, key: str, path: pathlib.Path, size: int) -> None:
        """Write object `key` (of `size` bytes, as listed) to local file `path`."""

    @abc.abstractmethod
    def delete(self, keys: list[str]) -> dict[str, str]:
        """Delete `keys` (a missing one counts as deleted); {key: the storage's error} for
        those it refused."""

    @abc.abstractmethod
    def read(self, key: str, offset: int, chunk_bytes: int) -> Iterator[bytes]:
        """Object `key` from `offset` on, in chunks; FileNotFoundError (raised by the call)
        when there is no such object, nothing when `offset` is at or past its end."""


class ObjectStorageManager(StorageManager):
    def __init__(self, store: ObjectStore, prefix: str | None = None) -> None:
        parts = [part for part in (prefix or "").split("/") if part]
        if any(part in (".", "..") for part in parts):
            raise ValueError(f"checkpoint_storage.prefix must not contain '.' or '..': {prefix!r}")
        self.store = store
        self.prefix = "/".join(parts)

    def __repr__(self) -> str:
        return "/".join(filter(None, [self.store.url, self.prefix]))

    def within(self, folder: str) -> "ObjectStorageManager":
        return ObjectStorageManager(self.store, "/".join(filter(None, [self.prefix, check_relpath(folder)])))

    def _folder(self, storage_id: str) -> str:
        """The key prefix of a checkpoint's objects, ending with `/`."""
        return "/".join(filter(None, [self.prefix, check_storage_id(storage_id)])) + "/"

    def upload(self, src: pathlib.Path, storage_id: str, *, paths: list[str] | None = None) -> None:
        folder = self._folder(storage_id)
        relpaths = list(local_resources(src)) if paths is None else [check_relpath(p) for p in paths]
        _run_all(
            lambda relpath: self.store.put(
                folder + relpath, None if relpath.endswith("/") else src / relpath
            ),
            relpaths,
        )

    def download(self, storage_id: str, dst: pathlib.Path, *, selector: Selector | None = None) -> None:
        folder = self._folder(storage_id)
        objects = self.store.list_objects(folder)
        if not objects:
            raise FileNotFoundError(f"checkpoint {storage_id} not found in {self!r}")
        dst.mkdir(parents=True, exist_ok=True)
        relpaths = [check_relpath(key[len(folder) :]) for key in objects]
        wanted = [relpath for relpath in relpaths if selector is None or selector(relpath)]
        for relpath in wanted:
            target = dst / relpath if relpath.endswith("/") else (dst / relpath).parent
            target.mkdir(parents=True, exist_ok=True)
        _run_all(
            lambda relpath: self.store.get(folder + relpath, dst / relpath, objects[folder + relpath]),
            [relpath for relpath in wanted if not relpath.endswith("/")],
        )

    def delete(self, storage_id: str, globs: list[str] | None = None) -> DeleteResult:
        folder = self._folder(storage_id)
        resources = self.list_resources(storage_id)
        doomed = to_delete(resources, globs)
        refused = self.store.delete([folder + relpath for relpath in doomed]) if doomed else {}
        errors = {key[len(folder) :]: error for key, error in refused.items()}
        deleted = {relpath for relpath in doomed if relpath not in errors}
        remaining = {relpath: size for relpath, size in resources.items() if relpath not in deleted}
        return DeleteResult(
            remaining=remaining,
            errors=[f"{relpath}: {error}" for relpath, error in sorted(errors.items())],
            bytes_freed=sum(resources[relpath] for relpath in deleted),
        )

    def list_resources(self, storage_id: str) -> dict[str, int]:
        folder = self._folder(storage_id)
        return {key[len(folder) :]: size for key, size in self.store.list_objects(folder).items()}

    def read(
        self, storage_id: str, relpath: str, offset: int = 0, chunk_bytes: int = READ_CHUNK_BYTES
    ) -> Iterator[bytes]:
        check_range(offset, chunk_bytes)
        if check_relpath(relpath).endswith("/"):
            raise FileNotFoundError(f"{relpath} is a folder of checkpoint {storage_id}, not a file")
        return self.store.read(self._folder(storage_id) + relpath, offset, chunk_bytes)


def _run_all(work: Callable[[str], None], relpaths: Iterable[str]) -> None:
    """work(relpath) for every relpath, TRANSFER_THREADS at a time; the first failure is
    raised once the others have stopped (none is started after it)."""
    relpaths = list(relpaths)
    if not relpaths:
        return
    with concurrent.futures.ThreadPoolExecutor(min(TRANSFER_THREADS, len(relpaths))) as pool:
        futures = [pool.submit(work, relpath) for relpath in relpaths]
        done, _ = concurrent.futures.wait(futures, return_when=concurrent.futures.FIRST_EXCEPTION)
        for future in done:
            error = future.exception()
            if error is not None:
                for pending in futures:
                    pending.cancel()
                raise error
