"""`core_context.checkpoint`: checkpoints in shared_fs storage, reported to the cluster.

A checkpoint is the directory `<storage root>/<uuid>` holding the user's files and a
`metadata.json`; the storage root is the same path on every agent (shared_fs).
"""

import contextlib
import enum
import json
import logging
import os
import pathlib
import shutil
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from determined.core import _validate
from determined.core._distributed import DistributedContext

logger = logging.getLogger("determined.core")

METADATA_FILE = "metadata.json"

Selector = Callable[[str], bool]
# (storage_id, steps_completed, metadata_json, resources) -> None
ReportCheckpoint = Callable[[str, int, str, dict[str, int]], None]


class DownloadMode(enum.Enum):
    LocalWorkersShareDownload = "LOCAL_WORKERS_SHARE_DOWNLOAD"
    NoSharedDownload = "NO_SHARED_DOWNLOAD"


class CheckpointContext:
    def __init__(self, root: pathlib.Path, distributed: DistributedContext, report: ReportCheckpoint) -> None:
        self._root = root
        self._distributed = distributed
        self._report = report

    def store_path(
        self, metadata: dict[str, Any] | None = None, *, shard: bool = False
    ) -> contextlib.AbstractContextManager[tuple[pathlib.Path, str]]:
        """A context manager yielding (path, storage_id) of a new checkpoint; on exit it writes
        the metadata and reports the checkpoint. If the block raises, the partial checkpoint
        is removed and nothing is reported.

        Non-sharded (the default): the chief alone stores. Sharded: every rank calls it and
        writes its part into the same directory (the chief's storage_id, broadcast); the
        chief merges the ranks' metadata and reports once all are done. With shared_fs the
        ranks write straight into the checkpoint, so two ranks writing one file is not
        detected (Determined's upload compares them): the last write wins.
        """
        if shard and self._distributed.size > 1:
            return self._store_sharded(metadata)
        return self._store(metadata, shard)

    @contextlib.contextmanager
    def _store(self, metadata: dict[str, Any] | None, shard: bool) -> Iterator[tuple[pathlib.Path, str]]:
        steps_completed = self._check_store(metadata, shard)
        storage_id = str(uuid.uuid4())
        path = self._root / storage_id
        path.mkdir(parents=True)
        try:
            yield path, storage_id
            metadata_json = _metadata_json(metadata or {})  # checked again: the block may change it
        except BaseException:
            shutil.rmtree(path, ignore_errors=True)
            raise
        (path / METADATA_FILE).write_text(metadata_json)
        self._report(storage_id, steps_completed, metadata_json, list_resources(path))

    @contextlib.contextmanager
    def _store_sharded(self, metadata: dict[str, Any] | None) -> Iterator[tuple[pathlib.Path, str]]:
        """Every rank, failed or not, takes part in the closing gather and broadcast, so that
        no rank waits forever on one whose block raised."""
        distributed = self._distributed
        _metadata_json(metadata or {})  # fail before training writes files, not after
        storage_id = distributed.broadcast(str(uuid.uuid4()) if distributed.rank == 0 else "")
        path = self._root / storage_id
        path.mkdir(parents=True, exist_ok=True)
        failure: Exception | None = None
        try:
            yield path, storage_id
        except Exception as error:  # noqa: BLE001 - raised again once the other ranks know
            failure = error
        parts = distributed.gather(None if failure is not None else (metadata or {}))
        outcome = self._finish_sharded(path, storage_id, parts) if parts is not None else None
        outcome = distributed.broadcast(outcome)
        if failure is not None:
            raise failure
        if outcome is not None:
            raise RuntimeError(outcome)

    def _finish_sharded(
        self, path: pathlib.Path, storage_id: str, parts: list[dict[str, Any] | None]
    ) -> str | None:
        """The chief's end of a sharded store: merge, write and report; what went wrong, if anything."""
        failed = [rank for rank, part in enumerate(parts) if part is None]
        try:
            if failed:
                raise RuntimeError(f"rank(s) {failed} failed while storing their shard")
            merged: dict[str, Any] = {}
            for part in parts:
                merged = merge_metadata(merged, part or {})
            steps_completed = _steps_completed(merged)
            metadata_json = _metadata_json(merged)
        except (RuntimeError, ValueError) as error:
            shutil.rmtree(path, ignore_errors=True)
            return f"sharded checkpoint {storage_id} discarded: {error}"
        (path / METADATA_FILE).write_text(metadata_json)
        self._report(storage_id, steps_completed, metadata_json, list_resources(path))
        return None

    def upload(
        self,
        ckpt_dir: str | os.PathLike[str],
        metadata: dict[str, Any] | None = None,
        *,
        shard: bool = False,
        selector: Selector | None = None,
    ) -> str:
        """Store a copy of an existing directory as a new checkpoint; return its storage_id."""
        with self.store_path(metadata, shard=shard) as (path, storage_id):
            _copy_tree(pathlib.Path(ckpt_dir), path, selector)
        return storage_id

    @contextlib.contextmanager
    def restore_path(
        self,
        storage_id: str,
        download_mode: DownloadMode = DownloadMode.LocalWorkersShareDownload,
        *,
        selector: Selector | None = None,
    ) -> Iterator[pathlib.Path]:
        """Yield the checkpoint's directory (shared_fs: no download needed)."""
        yield self._existing(storage_id)

    def download(
        self,
        storage_id: str,
        ckpt_dir: str | os.PathLike[str],
        download_mode: DownloadMode = DownloadMode.LocalWorkersShareDownload,
        *,
        selector: Selector | None = None,
    ) -> None:
        _copy_tree(self._existing(storage_id), pathlib.Path(ckpt_dir), selector)

    def get_metadata(self, storage_id: str) -> dict[str, Any]:
        metadata_file = self._existing(storage_id) / METADATA_FILE
        if not metadata_file.exists():
            return {}
        result: dict[str, Any] = json.loads(metadata_file.read_text())
        return result

    def delete(self, storage_id: str) -> None:
        """Remove the checkpoint's files (the cluster's record of it is not updated yet)."""
        shutil.rmtree(self._existing(storage_id))

    def _check_store(self, metadata: dict[str, Any] | None, shard: bool) -> int:
        if not shard and self._distributed.rank != 0:
            raise RuntimeError("only the chief (rank 0) may store a non-sharded checkpoint")
        steps_completed = _steps_completed(metadata or {})
        _metadata_json(metadata or {})  # fail before training writes files, not after
        return steps_completed

    def _existing(self, storage_id: str) -> pathlib.Path:
        try:
            uuid.UUID(storage_id)
        except (TypeError, ValueError, AttributeError):
            raise ValueError(f"not a checkpoint storage_id: {storage_id!r}") from None
        path = self._root / storage_id
        if not path.is_dir():
            raise FileNotFoundError(f"checkpoint {storage_id} not found in {self._root}")
        return path


def _steps_completed(metadata: dict[str, Any]) -> int:
    if "steps_completed" not in metadata:
        raise ValueError("checkpoint metadata must contain steps_completed")
    steps_completed = metadata["steps_completed"]
    if isinstance(steps_completed, bool) or not isinstance(steps_completed, int) or steps_completed < 0:
        raise ValueError(f"metadata['steps_completed'] must be an int >= 0, got {steps_completed!r}")
    return steps_completed


def merge_metadata(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """`base` and `update` merged recursively (sharded checkpoints: one dict per rank); equal
    values agree, two different non-dict values for one key raise ValueError."""
    merged = dict(base)
    for key, value in update.items():
        if key not in merged:
            merged[key] = value
        elif isinstance(merged[key], dict) and isinstance(value, dict):
            merged[key] = merge_metadata(merged[key], value)
        elif merged[key] != value:
            raise ValueError(f"the ranks' metadata disagree on {key!r}: {merged[key]!r} and {value!r}")
    return merged


def _metadata_json(metadata: dict[str, Any]) -> str:
    """The checkpoint's metadata.json text, which its report carries too: at most
    MAX_REPORT_BYTES, every value JSON (ReportError naming the key otherwise)."""
    return _validate.json_object(metadata, "the checkpoint's metadata", "metadata", indent=2)


def list_resources(root: pathlib.Path) -> dict[str, int]:
    """{relative path: size}, directories as `dir/` of size 0, as Determined lists them."""
    resources: dict[str, int] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        here = pathlib.Path(dirpath)
        for name in dirnames:
            resources[f"{(here / name).relative_to(root).as_posix()}/"] = 0
        for name in filenames:
            resources[(here / name).relative_to(root).as_posix()] = (here / name).stat().st_size
    return resources


def _copy_tree(source: pathlib.Path, dest: pathlib.Path, selector: Selector | None) -> None:
    if not source.is_dir():
        raise FileNotFoundError(f"not a directory: {source}")
    dest.mkdir(parents=True, exist_ok=True)
    for relpath in list_resources(source):
        if relpath.endswith("/") or (selector is not None and not selector(relpath)):
            continue
        (dest / relpath).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source / relpath, dest / relpath)


def storage_root(checkpoint_storage: str | dict[str, Any]) -> pathlib.Path:
    """The storage root from init()'s `checkpoint_storage` or the config's section."""
    if isinstance(checkpoint_storage, str):
        if "://" in checkpoint_storage:
            raise NotImplementedError(
                f"only shared_fs checkpoint storage is supported, got {checkpoint_storage}"
            )
        return pathlib.Path(checkpoint_storage)
    kind = checkpoint_storage.get("type")
    if kind == "shared_fs":
        root = pathlib.Path(checkpoint_storage["host_path"])
        storage_path = checkpoint_storage.get("storage_path")
        return root / storage_path if storage_path else root
    if kind == "directory":
        return pathlib.Path(checkpoint_storage["container_path"])
    raise NotImplementedError(f"checkpoint storage type {kind!r} is not supported yet")


def default_storage_root() -> pathlib.Path:
    """Off-cluster checkpoints go under the user data dir (~/.local/share/determined)."""
    data_home = os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")
    return pathlib.Path(data_home) / "determined" / "checkpoints"
