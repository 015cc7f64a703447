"""`core_context.checkpoint`: checkpoints in the experiment's checkpoint storage, reported
to the cluster.

A checkpoint is the folder `<storage>/<uuid>` holding the user's files and a
`metadata.json`. On a local file system (shared_fs, directory: the same path on every
agent) the user's code writes straight into it. On a cloud storage (s3, gcs, azure) it
writes into a local staging folder, uploaded when the `store_path` block ends; a restore
downloads into a local folder that is removed when the `restore_path` block ends.
"""

import contextlib
import enum
import hashlib
import json
import logging
import os
import pathlib
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from determined.common.storage import LocalStorageManager, StorageError, StorageManager, local_resources
from determined.core import _validate
from determined.core._distributed import DistributedContext

logger = logging.getLogger("determined.core")

METADATA_FILE = "metadata.json"

Selector = Callable[[str], bool]
# (storage_id, steps_completed, metadata_json, resources) -> None
ReportCheckpoint = Callable[[str, int, str, dict[str, int]], None]
# Asks the cluster to delete a checkpoint (its checkpoint service deletes the files).
AskDelete = Callable[[str], None]


class DownloadMode(enum.Enum):
    LocalWorkersShareDownload = "LOCAL_WORKERS_SHARE_DOWNLOAD"
    NoSharedDownload = "NO_SHARED_DOWNLOAD"


class CheckpointContext:
    def __init__(
        self,
        storage: StorageManager | pathlib.Path,
        distributed: DistributedContext,
        report: ReportCheckpoint,
        *,
        ask_delete: AskDelete | None = None,
        staging: pathlib.Path | None = None,
    ) -> None:
        """`storage`: the checkpoint storage (a folder: a local storage there). `report` records
        a stored checkpoint (on a cluster: with the gateway). `ask_delete`: on a cluster, asks
        it to delete a checkpoint; None: `delete` removes the files itself. `staging`: the
        local folder where a cloud storage's checkpoints are written and restored (default:
        `default_staging()`)."""
        self._storage = LocalStorageManager(storage) if isinstance(storage, pathlib.Path) else storage
        self._distributed = distributed
        self._report = report
        self._ask_delete = ask_delete
        self._staging = staging or default_staging()
        # The local folder checkpoints are written under (code copies leave it out).
        self._root = local_root(self._storage, self._staging)

    def store_path(
        self, metadata: dict[str, Any] | None = None, *, shard: bool = False
    ) -> contextlib.AbstractContextManager[tuple[pathlib.Path, str]]:
        """A context manager yielding (path, storage_id) of a new checkpoint; on exit it writes
        the metadata, uploads the files (cloud storage) and reports the checkpoint. If the
        block raises, the partial checkpoint is removed and nothing is reported.

        Non-sharded (the default): the chief alone stores. Sharded: every rank calls it and
        writes its part (the chief's storage_id, broadcast); the chief merges the ranks'
        metadata and reports once all are done. On a local file system the ranks write into
        the checkpoint itself, so two ranks writing one file is not detected: the last write
        wins. On a cloud storage the ranks of a node share a staging folder; each file is
        uploaded once, and two nodes holding one path with different contents discard the
        checkpoint (equal contents are fine).
        """
        if shard and self._distributed.size > 1:
            return self._store_sharded(metadata)
        return self._store(metadata, shard)

    @contextlib.contextmanager
    def _store(self, metadata: dict[str, Any] | None, shard: bool) -> Iterator[tuple[pathlib.Path, str]]:
        steps_completed = self._check_store(metadata, shard)
        storage_id = str(uuid.uuid4())
        path = self._writable(storage_id)
        path.mkdir(parents=True)
        uploading = False
        try:
            yield path, storage_id
            metadata_json = _metadata_json(metadata or {})  # checked again: the block may change it
            (path / METADATA_FILE).write_text(metadata_json)
            resources = local_resources(path)
            uploading = True
            self._storage.upload(path, storage_id)
        except BaseException:
            self._discard(path, storage_id, uploaded=uploading)
            raise
        finally:
            self._drop_staging(path, storage_id)
        self._report(storage_id, steps_completed, metadata_json, resources)

    @contextlib.contextmanager
    def _store_sharded(self, metadata: dict[str, Any] | None) -> Iterator[tuple[pathlib.Path, str]]:
        """Every rank, failed or not, takes part in the closing collectives, so that no rank
        waits forever on one whose block raised."""
        distributed = self._distributed
        _metadata_json(metadata or {})  # fail before training writes files, not after
        storage_id = distributed.broadcast(str(uuid.uuid4()) if distributed.rank == 0 else "")
        path = self._writable(storage_id)
        path.mkdir(parents=True, exist_ok=True)
        failure: Exception | None = None
        try:
            yield path, storage_id
        except Exception as error:  # noqa: BLE001 - raised again once the other ranks know
            failure = error
        outcome = self._finish_sharded(path, storage_id, None if failure is not None else (metadata or {}))
        if failure is not None:
            raise failure
        if outcome is not None:
            raise RuntimeError(outcome)

    def _finish_sharded(self, path: pathlib.Path, storage_id: str, part: dict[str, Any] | None) -> str | None:
        """The collectives that end a sharded store, on every rank: merge the metadata, upload
        (cloud storage), then the chief reports; what went wrong, if anything, the same on
        every rank. A discarded checkpoint leaves nothing behind. Nothing here raises before
        the last broadcast, so that no rank is left waiting for another."""
        distributed = self._distributed
        parts = distributed.gather(part)
        merged: dict[str, Any] = {}
        error: str | None = None
        if parts is not None:
            try:
                merged = _merge_parts(parts)
            except (RuntimeError, ValueError) as problem:
                error = str(problem)
        error = distributed.broadcast(error)
        resources: dict[str, int] = {}
        if error is None and self._storage.local_path(storage_id) is None:
            error, resources = self._upload_shards(path, storage_id)
        report: tuple[str, int, str, dict[str, int]] | None = None
        if error is None and distributed.rank == 0:
            try:
                report = self._seal_sharded(path, storage_id, merged, resources)
            except (ValueError, StorageError, OSError) as problem:
                error = str(problem)
        error = distributed.broadcast(error)
        if error is not None:
            if distributed.rank == 0:
                self._discard(path, storage_id, uploaded=True)
            elif distributed.local_rank == 0:
                shutil.rmtree(path, ignore_errors=True)
            return f"sharded checkpoint {storage_id} discarded: {error}"
        if distributed.local_rank == 0:
            self._drop_staging(path, storage_id)
        if report is not None:  # the chief, as a non-sharded store reports: after the files are stored
            self._report(*report)
        return None

    def _upload_shards(self, path: pathlib.Path, storage_id: str) -> tuple[str | None, dict[str, int]]:
        """Cloud storage: each node's local chief lists its staging folder (with digests when
        there are several nodes), the chief picks one uploader per file (the lowest rank that
        has it) or finds a conflict, and every uploader uploads its files. What went wrong (on
        the chief), and every uploaded file with its size."""
        distributed = self._distributed
        listing: _Listing | str | None = None
        if distributed.local_rank == 0:
            try:
                listing = _list_shard(path, digests=distributed.cross_size > 1)
            except OSError as problem:
                listing = f"node {distributed.cross_rank}: {problem}"
        listings = distributed.gather(listing)
        plan = _upload_plan(listings) if listings is not None else None
        plan = distributed.broadcast(plan)
        if isinstance(plan, str):
            return plan, {}
        assert plan is not None  # the chief's broadcast: a str or a plan
        uploads, resources = plan
        failure: str | None = None
        try:
            self._storage.upload(path, storage_id, paths=uploads.get(distributed.rank, []))
        except Exception as problem:  # noqa: BLE001 - every rank must hear of it
            failure = f"rank {distributed.rank}: {problem}"
        failures = distributed.gather(failure)
        return ("; ".join(f for f in failures or [] if f) or None), resources

    def _seal_sharded(
        self, path: pathlib.Path, storage_id: str, merged: dict[str, Any], resources: dict[str, int]
    ) -> tuple[str, int, str, dict[str, int]]:
        """The chief writes the merged metadata (and uploads it); what it will report."""
        steps_completed = _steps_completed(merged)
        metadata_json = _metadata_json(merged)
        (path / METADATA_FILE).write_text(metadata_json)
        if self._storage.local_path(storage_id) is None:
            self._storage.upload(path, storage_id, paths=[METADATA_FILE])
            resources = dict(resources, **{METADATA_FILE: (path / METADATA_FILE).stat().st_size})
        else:
            resources = local_resources(path)
        return storage_id, steps_completed, metadata_json, resources

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
            _copy_selected(pathlib.Path(ckpt_dir), path, selector)
        return storage_id

    @contextlib.contextmanager
    def restore_path(
        self,
        storage_id: str,
        download_mode: DownloadMode = DownloadMode.LocalWorkersShareDownload,
        *,
        selector: Selector | None = None,
    ) -> Iterator[pathlib.Path]:
        """Yield a local folder holding the checkpoint's files: on a local file system the
        checkpoint itself (`selector` does not apply), on a cloud storage a download (only
        the files `selector` accepts), removed when the block ends. In the default mode every
        worker must call it and each node's local chief downloads for its node."""
        local = self._storage.local_path(storage_id)
        if local is not None:
            if not local.is_dir():
                raise FileNotFoundError(f"checkpoint {storage_id} not found in {self._root}")
            yield local
            return
        shared = download_mode is DownloadMode.LocalWorkersShareDownload
        downloads = self._staging / "restored"
        downloads.mkdir(parents=True, exist_ok=True)
        path: pathlib.Path | None = None
        if self._distributed.local_rank == 0 or not shared:
            path = pathlib.Path(tempfile.mkdtemp(prefix=f"{storage_id}-", dir=downloads))
        try:
            self._download(storage_id, path, shared=shared, selector=selector)
            if shared:
                path = self._distributed.broadcast_local(path)
            assert path is not None  # made above, or the local chief's, broadcast
            yield path
        finally:
            if shared:
                self._distributed.allgather_local(None)  # every worker of the node is done with it
            if path is not None and (self._distributed.local_rank == 0 or not shared):
                shutil.rmtree(path, ignore_errors=True)

    def download(
        self,
        storage_id: str,
        ckpt_dir: str | os.PathLike[str],
        download_mode: DownloadMode = DownloadMode.LocalWorkersShareDownload,
        *,
        selector: Selector | None = None,
    ) -> None:
        """Copy the checkpoint's files (those `selector` accepts) into `ckpt_dir`. In the
        default mode every worker must call it and each node's local chief downloads."""
        shared = download_mode is DownloadMode.LocalWorkersShareDownload
        self._download(storage_id, pathlib.Path(ckpt_dir), shared=shared, selector=selector)

    def _download(
        self, storage_id: str, dst: pathlib.Path | None, *, shared: bool, selector: Selector | None
    ) -> None:
        """Download into `dst` (the local chief alone when `shared`; the others learn how it
        went, and raise its error too)."""
        error: BaseException | None = None
        if dst is not None and (self._distributed.local_rank == 0 or not shared):
            try:
                self._storage.download(storage_id, dst, selector=selector)
            except Exception as problem:  # noqa: BLE001 - shared with the node, then raised
                error = problem
        if shared:
            error = self._distributed.broadcast_local(error)
        if error is not None:
            raise error

    def get_metadata(self, storage_id: str) -> dict[str, Any]:
        """The checkpoint's metadata.json ({} when it has none)."""
        try:
            text = b"".join(self._storage.read(storage_id, METADATA_FILE)).decode()
        except FileNotFoundError:
            if not self._storage.list_resources(storage_id):
                raise FileNotFoundError(f"checkpoint {storage_id} not found in {self._storage!r}") from None
            return {}
        result: dict[str, Any] = json.loads(text)
        return result

    def delete(self, storage_id: str) -> None:
        """Delete the checkpoint. On a cluster the cluster is asked (its checkpoint service
        deletes the files and records the checkpoint as deleted, shortly after); off-cluster
        the files are deleted here (StorageError naming those that could not be)."""
        if self._ask_delete is not None:
            self._ask_delete(storage_id)
            return
        if not self._storage.list_resources(storage_id):
            raise FileNotFoundError(f"checkpoint {storage_id} not found in {self._storage!r}")
        result = self._storage.delete(storage_id)
        if result.errors:
            raise StorageError(f"checkpoint {storage_id} was not fully deleted: " + "; ".join(result.errors))

    def _writable(self, storage_id: str) -> pathlib.Path:
        """Where a new checkpoint's files are written: the checkpoint itself on a local file
        system, else the node's staging folder for it."""
        local = self._storage.local_path(storage_id)
        if local is not None:
            return local
        return self._staging / f"node-{self._distributed.cross_rank}" / storage_id

    def _drop_staging(self, path: pathlib.Path, storage_id: str) -> None:
        """Remove a staging folder once its files are uploaded (a local checkpoint stays)."""
        if self._storage.local_path(storage_id) is None:
            shutil.rmtree(path, ignore_errors=True)

    def _discard(self, path: pathlib.Path, storage_id: str, *, uploaded: bool) -> None:
        """Remove a checkpoint that will not be reported, wherever its files got to."""
        shutil.rmtree(path, ignore_errors=True)
        if uploaded and self._storage.local_path(storage_id) is None:
            try:
                self._storage.delete(storage_id)
            except (StorageError, OSError):
                logger.warning(
                    "could not remove the discarded checkpoint %s from storage", storage_id, exc_info=True
                )

    def _check_store(self, metadata: dict[str, Any] | None, shard: bool) -> int:
        if not shard and self._distributed.rank != 0:
            raise RuntimeError("only the chief (rank 0) may store a non-sharded checkpoint")
        steps_completed = _steps_completed(metadata or {})
        _metadata_json(metadata or {})  # fail before training writes files, not after
        return steps_completed


# A node's staging folder: {relpath: size}, and {relpath: md5} of its files (several nodes).
_Listing = tuple[dict[str, int], dict[str, str]]
# {rank: the relpaths it uploads}, and every file with its size.
_Plan = tuple[dict[int, list[str]], dict[str, int]]


def _list_shard(path: pathlib.Path, *, digests: bool) -> _Listing:
    files = local_resources(path)
    if not digests:
        return files, {}
    return files, {relpath: _md5(path / relpath) for relpath in files if not relpath.endswith("/")}


def _upload_plan(listings: list[_Listing | str | None]) -> _Plan | str:
    """Who uploads what: each path by the lowest rank whose node has it; a str when a node
    could not list its files or two nodes hold different files under one path."""
    problems = [listing for listing in listings if isinstance(listing, str)]
    if problems:
        return "; ".join(problems)
    uploads: dict[int, list[str]] = {}
    owners: dict[str, tuple[int, str | None]] = {}  # relpath -> (uploading rank, its digest)
    resources: dict[str, int] = {}
    for rank, listing in enumerate(listings):
        if not isinstance(listing, tuple):
            continue
        files, digests = listing
        for relpath, size in files.items():
            if relpath not in owners:
                owners[relpath] = (rank, digests.get(relpath))
                resources[relpath] = size
                uploads.setdefault(rank, []).append(relpath)
            elif owners[relpath][1] != digests.get(relpath):
                return f"rank {owners[relpath][0]} and rank {rank} stored different files named {relpath}"
    return uploads, resources


def _md5(path: pathlib.Path) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with path.open("rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def _merge_parts(parts: list[dict[str, Any] | None]) -> dict[str, Any]:
    """The ranks' metadata merged; RuntimeError naming the ranks whose block failed."""
    failed = [rank for rank, part in enumerate(parts) if part is None]
    if failed:
        raise RuntimeError(f"rank(s) {failed} failed while storing their shard")
    merged: dict[str, Any] = {}
    for part in parts:
        merged = merge_metadata(merged, part or {})
    _steps_completed(merged)
    return merged


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


def _copy_selected(source: pathlib.Path, dest: pathlib.Path, selector: Selector | None) -> None:
    if not source.is_dir():
        raise FileNotFoundError(f"not a directory: {source}")
    for relpath in local_resources(source):
        if relpath.endswith("/") or (selector is not None and not selector(relpath)):
            continue
        (dest / relpath).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source / relpath, dest / relpath)


def storage_section(checkpoint_storage: str | dict[str, Any]) -> dict[str, Any]:
    """init()'s `checkpoint_storage` (a folder, s3://..., gs://..., or a section) as a section."""
    if isinstance(checkpoint_storage, str):
        from determined.common.storage import section_from_string

        return section_from_string(checkpoint_storage)
    return checkpoint_storage


def default_staging() -> pathlib.Path:
    """Where checkpoints of a cloud storage are written and restored: `determined-checkpoints`
    in the system's temporary folder."""
    return pathlib.Path(tempfile.gettempdir()) / "determined-checkpoints"


def local_root(storage: StorageManager, staging: pathlib.Path | None = None) -> pathlib.Path:
    """The local folder a storage's checkpoints are written under: the storage itself on a
    local file system, else the staging folder (TensorBoard files stay there too)."""
    if isinstance(storage, LocalStorageManager):
        return storage.root
    return staging or default_staging()


def default_storage_root() -> pathlib.Path:
    """Off-cluster checkpoints go under the user data dir (~/.local/share/determined)."""
    data_home = os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")
    return pathlib.Path(data_home) / "determined" / "checkpoints"
