"""The checkpoint service's deleter, one checkpoint at a time (`Deleter.delete`):
the outcome it records for what the storage did, on a real folder."""

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from determined.common import storage
from determined.proto import events_pb2 as ev
from services.checkpoint.deleter import Deleter, Job
from services.checkpoint.state import Deletion, Target

FILES = {"model.pt": b"weights", "metadata.json": b"{}", "logs/train.txt": b"loss 1"}


def deletion(
    root: Path, *uuids: str, globs: tuple[str, ...] = (), storage_json: str | None = None
) -> Deletion:
    targets = tuple(Target(uuid, 3, {name: len(data) for name, data in FILES.items()}) for uuid in uuids)
    section = f'{{"type": "shared_fs", "host_path": "{root}"}}' if storage_json is None else storage_json
    return Deletion(
        1, 2, targets, globs, "experiment ended", section, event_id="gc-1-2", correlation_id="end-1"
    )


def stored(root: Path, uuid: str) -> None:
    for name, data in FILES.items():
        (root / uuid / name).parent.mkdir(parents=True, exist_ok=True)
        (root / uuid / name).write_bytes(data)


def deleter(**kwargs: Any) -> Deleter:
    return Deleter(None, "service:checkpoint", retry_delay_s=0.0, **kwargs)  # type: ignore[arg-type]


def test_a_deleted_checkpoint(tmp_path: Path) -> None:
    stored(tmp_path, "a")
    job = deletion(tmp_path, "a")
    append = deleter().delete(Job(job, job.targets[0]))
    event = append.payload
    assert isinstance(event, ev.CheckpointDeleted)
    assert (append.aggregate, append.msg_id) == ("checkpoint/a", "checkpoint-deleted-a")
    assert (append.causation_id, append.correlation_id) == ("gc-1-2", "end-1")
    assert (event.uuid, event.experiment_id, event.trial_id, event.deletion_id) == ("a", 1, 3, 2)
    assert event.bytes_freed == sum(len(data) for data in FILES.values())
    assert not (tmp_path / "a").exists()


def test_deleting_again_what_is_gone_is_a_deletion(tmp_path: Path) -> None:
    """A service killed after deleting and before recording does it again."""
    job = deletion(tmp_path, "a")
    append = deleter().delete(Job(job, job.targets[0]))
    assert isinstance(append.payload, ev.CheckpointDeleted)
    assert append.payload.bytes_freed == sum(len(data) for data in FILES.values())


def test_globs_leave_the_other_files(tmp_path: Path) -> None:
    stored(tmp_path, "a")
    job = deletion(tmp_path, "a", globs=("*.pt",))
    append = deleter().delete(Job(job, job.targets[0]))
    event = append.payload
    assert isinstance(event, ev.CheckpointPartiallyDeleted)
    assert append.msg_id == "checkpoint-partially-deleted-a-2"
    assert dict(event.remaining) == {"metadata.json": 2, "logs/": 0, "logs/train.txt": 6}
    assert (event.error, event.bytes_freed) == ("", len(FILES["model.pt"]))


@pytest.mark.parametrize(
    "storage_json, error",
    [
        ("", "ValueError: the experiment's config has no checkpoint_storage section"),
        ('{"type": "s3"}', "ValueError: checkpoint_storage.bucket is required for s3 storage"),
    ],
)
def test_a_storage_that_cannot_be_built_leaves_every_file_and_says_why(
    tmp_path: Path, storage_json: str, error: str
) -> None:
    job = deletion(tmp_path, "a", "b", storage_json=storage_json)
    gc = deleter()
    for target in job.targets:
        event = gc.delete(Job(job, target)).payload
        assert isinstance(event, ev.CheckpointPartiallyDeleted)
        assert (dict(event.remaining), event.error, event.bytes_freed) == (target.resources, error, 0)


class Failing(storage.LocalStorageManager):
    """A real folder whose delete fails `failures` times first."""

    def __init__(self, root: Path, failures: int) -> None:
        super().__init__(root)
        self.failures = failures
        self.calls = 0

    def delete(self, storage_id: str, globs: list[str] | None = None) -> storage.DeleteResult:
        self.calls += 1
        if self.calls <= self.failures:
            raise storage.StorageError(f"s3://bucket: SlowDown (attempt {self.calls})")
        return super().delete(storage_id, globs)


@pytest.mark.parametrize("failures, deleted", [(2, True), (3, False)])
def test_a_storage_error_is_tried_again_then_recorded(tmp_path: Path, failures: int, deleted: bool) -> None:
    stored(tmp_path, "a")
    manager = Failing(tmp_path, failures)

    def build(section: Mapping[str, Any]) -> storage.StorageManager:
        return manager

    job = deletion(tmp_path, "a")
    event = deleter(build=build).delete(Job(job, job.targets[0])).payload
    assert manager.calls == 3
    if deleted:
        assert isinstance(event, ev.CheckpointDeleted)
    else:
        assert isinstance(event, ev.CheckpointPartiallyDeleted)
        assert event.error == "s3://bucket: SlowDown (attempt 3)"
        assert (tmp_path / "a" / "model.pt").exists()


def test_one_manager_per_storage(tmp_path: Path) -> None:
    built: list[Mapping[str, Any]] = []

    def build(section: Mapping[str, Any]) -> storage.StorageManager:
        built.append(section)
        return storage.build(section)

    gc = deleter(build=build)
    job = deletion(tmp_path, "a", "b")
    for target in job.targets:
        gc.delete(Job(job, target))
    assert len(built) == 1
