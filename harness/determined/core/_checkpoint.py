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

    @contextlib.contextmanager
    def store_path(
        self, metadata: dict[str, Any] | None = None, *, shard: bool = False
    ) -> Iterator[tuple[pathlib.Path, str]]:
        """Yield (path, storage_id) of a new checkpoint; on exit write metadata and report it.

        If the block raises, the partial checkpoint is removed and nothing is reported.
        """
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
        if shard and self._distributed.size > 1:
            raise NotImplementedError("sharded checkpoints arrive with distributed training")
        if not shard and self._distributed.rank != 0:
            raise RuntimeError("only the chief (rank 0) may store a non-sharded checkpoint")
        if metadata is None or "steps_completed" not in metadata:
            raise ValueError("checkpoint metadata must contain steps_completed")
        steps_completed = metadata["steps_completed"]
        if isinstance(steps_completed, bool) or not isinstance(steps_completed, int) or steps_completed < 0:
            raise ValueError(f"metadata['steps_completed'] must be an int >= 0, got {steps_completed!r}")
        _metadata_json(metadata)  # fail before training writes files, not after
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
