"""`shared_fs` and `directory` storage: checkpoints are folders under a root that every
worker (and the checkpoint service) sees at the same path."""

import errno
import pathlib
import shutil
from collections.abc import Iterator
from typing import BinaryIO

from determined.common.storage._base import READ_CHUNK_BYTES, DeleteResult, Selector, StorageManager
from determined.common.storage._paths import (
    check_range,
    check_relpath,
    check_storage_id,
    local_resources,
    open_checkpoint_file,
    to_delete,
)

# The size of each read while a checkpoint's file is copied out of the storage.
CHUNK_BYTES = 1 << 20


class LocalStorageManager(StorageManager):
    def __init__(self, root: pathlib.Path) -> None:
        self.root = root

    def __repr__(self) -> str:
        return str(self.root)

    def within(self, folder: str) -> "LocalStorageManager":
        return LocalStorageManager(self.root / check_relpath(folder).rstrip("/"))

    def local_path(self, storage_id: str) -> pathlib.Path:
        return self.root / check_storage_id(storage_id)

    def upload(self, src: pathlib.Path, storage_id: str, *, paths: list[str] | None = None) -> None:
        dest = self.local_path(storage_id)
        if dest.exists() and src.resolve() == dest.resolve():
            return  # written in place (store_path on a local file system)
        relpaths = list(local_resources(src)) if paths is None else [check_relpath(p) for p in paths]
        copy_files(src, dest, relpaths)

    def download(self, storage_id: str, dst: pathlib.Path, *, selector: Selector | None = None) -> None:
        """As every backend; a file that may lead outside the checkpoint (a link, a hard
        link) stops the download with UnsafeCheckpointFileError naming it."""
        source = self._existing(storage_id)
        dst.mkdir(parents=True, exist_ok=True)
        for relpath in [p for p in local_resources(source) if selector is None or selector(p)]:
            if relpath.endswith("/"):
                (dst / relpath).mkdir(parents=True, exist_ok=True)
            else:
                (dst / relpath).parent.mkdir(parents=True, exist_ok=True)
                with (
                    open_checkpoint_file(self.root, storage_id, relpath) as src,
                    open(dst / relpath, "wb") as out,
                ):
                    shutil.copyfileobj(src, out, CHUNK_BYTES)

    def delete(self, storage_id: str, globs: list[str] | None = None) -> DeleteResult:
        folder = self.local_path(storage_id)
        resources = self.list_resources(storage_id)
        errors: list[str] = []
        freed = 0
        for relpath in to_delete(resources, globs):
            try:
                if relpath.endswith("/"):
                    _remove_empty_folder(folder / relpath)
                else:
                    (folder / relpath).unlink(missing_ok=True)
                    freed += resources[relpath]
            except OSError as error:
                errors.append(f"{relpath}: {error.strerror or error}")
        if not globs:
            try:
                _remove_empty_folder(folder)
            except OSError as error:
                errors.append(f"{storage_id}/: {error.strerror or error}")
        return DeleteResult(remaining=self.list_resources(storage_id), errors=errors, bytes_freed=freed)

    def list_resources(self, storage_id: str) -> dict[str, int]:
        folder = self.local_path(storage_id)
        return local_resources(folder) if folder.is_dir() else {}

    def read(
        self, storage_id: str, relpath: str, offset: int = 0, chunk_bytes: int = READ_CHUNK_BYTES
    ) -> Iterator[bytes]:
        check_range(offset, chunk_bytes)
        if check_relpath(relpath).endswith("/"):
            raise FileNotFoundError(f"{relpath} is a folder of checkpoint {storage_id}, not a file")
        # FileNotFoundError or UnsafeCheckpointFileError now, not at the first chunk.
        handle = open_checkpoint_file(self.root, storage_id, relpath)
        return _chunks(handle, offset, chunk_bytes)

    def _existing(self, storage_id: str) -> pathlib.Path:
        folder = self.local_path(storage_id)
        if not folder.is_dir():
            raise FileNotFoundError(f"checkpoint {storage_id} not found in {self.root}")
        return folder


def copy_files(source: pathlib.Path, dest: pathlib.Path, relpaths: list[str]) -> None:
    """Copy `relpaths` (files, and folders as `dir/`) of `source` into `dest`."""
    dest.mkdir(parents=True, exist_ok=True)
    for relpath in relpaths:
        if relpath.endswith("/"):
            (dest / relpath).mkdir(parents=True, exist_ok=True)
            continue
        (dest / relpath).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source / relpath, dest / relpath)


def _remove_empty_folder(folder: pathlib.Path) -> None:
    """rmdir that leaves a folder still holding something (a file that could not be
    deleted is reported once, as itself) and one already gone."""
    try:
        folder.rmdir()
    except FileNotFoundError:
        pass
    except OSError as error:
        if error.errno != errno.ENOTEMPTY:
            raise


def _chunks(handle: BinaryIO, offset: int, chunk_bytes: int) -> Iterator[bytes]:
    with handle:
        handle.seek(offset)
        while chunk := handle.read(chunk_bytes):
            yield chunk
