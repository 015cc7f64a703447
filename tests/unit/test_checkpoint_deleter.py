"""The checkpoint service's deleter, one checkpoint at a time (`Deleter.delete`)
and one experiment's TensorBoard files at a time (`Deleter.delete_tensorboards`):
the outcome it records for what the storage did, on a real folder; and, in the
checkpoint service's shell on the in-memory log, an experiment deletion that
deletes its TensorBoard files."""

import asyncio
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from determined.common import storage
from determined.proto import events_pb2 as ev
from services.checkpoint.core import GcCore
from services.checkpoint.deleter import Deleter, Job, TensorboardJob
from services.checkpoint.state import Deletion, Target
from services.common.decider import Shell
from services.common.envelope import Append, payload_of
from services.common.memory_log import MemoryEventLog

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


# -- TensorBoard files ------------------------------------------------------------------

TENSORBOARD_FILES = {"trial/1/events.out.tfevents.1": b"scalars", "trial/2/events.out.tfevents.2": b"more"}


def shared_fs(root: Path) -> str:
    return json.dumps({"type": "shared_fs", "host_path": str(root)})


def tensorboard_job(root: Path, storage_json: str | None = None) -> TensorboardJob:
    section = shared_fs(root) if storage_json is None else storage_json
    return TensorboardJob(1, 2, section, "delete-1-2", "delete-1-2")


def written_tensorboards(root: Path, experiment_id: int = 1) -> Path:
    """The experiment's TensorBoard folder, as its trials upload it."""
    folder = root / "tensorboard" / "experiment" / str(experiment_id)
    for name, data in TENSORBOARD_FILES.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    return folder


def test_an_experiments_tensorboard_folder_is_deleted_and_no_other(tmp_path: Path) -> None:
    folder = written_tensorboards(tmp_path)
    other = written_tensorboards(tmp_path, experiment_id=10)
    append = deleter().delete_tensorboards(tensorboard_job(tmp_path))
    event = append.payload
    assert isinstance(event, ev.TensorboardFilesDeleted)
    assert (append.aggregate, append.msg_id) == ("experiment/1", "tensorboard-files-deleted-1-2")
    assert (append.causation_id, append.correlation_id) == ("delete-1-2", "delete-1-2")
    assert (event.experiment_id, event.delete_request, dict(event.remaining), event.error) == (1, 2, {}, "")
    assert event.bytes_freed == sum(len(data) for data in TENSORBOARD_FILES.values())
    assert not folder.exists() and (other / "trial" / "1").is_dir()


@pytest.mark.parametrize("storage_json", [None, ""])
def test_no_tensorboard_files_is_nothing_left(tmp_path: Path, storage_json: str | None) -> None:
    """Files already gone (a service killed before recording), none ever
    written, or no checkpoint storage to write them to."""
    event = deleter().delete_tensorboards(tensorboard_job(tmp_path, storage_json)).payload
    assert isinstance(event, ev.TensorboardFilesDeleted)
    assert (dict(event.remaining), event.error, event.bytes_freed) == ({}, "", 0)


def test_a_storage_that_cannot_be_built_leaves_the_tensorboard_files_and_says_why(tmp_path: Path) -> None:
    event = deleter().delete_tensorboards(tensorboard_job(tmp_path, '{"type": "s3"}')).payload
    assert isinstance(event, ev.TensorboardFilesDeleted)
    assert event.error == "ValueError: checkpoint_storage.bucket is required for s3 storage"


class FailingWithin(storage.LocalStorageManager):
    """A real folder whose sub-folders' deletes fail `failures` times first."""

    def __init__(self, root: Path, failures: int) -> None:
        super().__init__(root)
        self.inner = Failing(root / "tensorboard" / "experiment", failures)

    def within(self, folder: str) -> storage.LocalStorageManager:
        assert folder == "tensorboard/experiment"
        return self.inner


@pytest.mark.parametrize("failures, deleted", [(2, True), (3, False)])
def test_a_storage_error_deleting_tensorboard_files_is_tried_again_then_recorded(
    tmp_path: Path, failures: int, deleted: bool
) -> None:
    folder = written_tensorboards(tmp_path)
    manager = FailingWithin(tmp_path, failures)
    event = deleter(build=lambda section: manager).delete_tensorboards(tensorboard_job(tmp_path)).payload
    assert isinstance(event, ev.TensorboardFilesDeleted)
    assert manager.inner.calls == 3
    assert event.error == ("" if deleted else "s3://bucket: SlowDown (attempt 3)")
    assert folder.exists() is not deleted


async def test_a_delete_request_in_the_log_deletes_the_tensorboard_files_once_then_the_experiment(
    tmp_path: Path,
) -> None:
    """The service (re)started on a log whose delete request has no outcome yet."""
    folder = written_tensorboards(tmp_path)
    log = MemoryEventLog()
    config = {
        "searcher": {"name": "single", "metric": "loss"},
        "checkpoint_storage": json.loads(shared_fs(tmp_path)),
    }
    for payload in (
        ev.ExperimentCreated(experiment_id=1, config_json=json.dumps(config)),
        ev.ExperimentStateChanged(experiment_id=1, state=ev.ExperimentState.EXPERIMENT_STATE_COMPLETED),
        ev.ExperimentDeleteRequested(experiment_id=1),
    ):
        await log.append(
            Append("experiment/1", payload, f"given-{type(payload).__name__}"), actor="user:test"
        )
    gc = Deleter(log, "service:checkpoint", retry_delay_s=0.0)
    deleted: list[TensorboardJob] = []
    delete_tensorboards = gc.delete_tensorboards

    def counted(job: TensorboardJob) -> Append:
        deleted.append(job)
        return delete_tensorboards(job)

    gc.delete_tensorboards = counted  # type: ignore[method-assign]
    shell = Shell(log, GcCore(), "service:checkpoint", on_state=gc.on_state)
    task = asyncio.create_task(shell.run())
    try:
        async with asyncio.timeout(10):
            while not any(isinstance(e, ev.ExperimentDeleted) for e in await events(log)):
                await asyncio.sleep(0.01)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await gc.stop()
    stored = [s.envelope async for s in log.read(["experiment"], follow=False)]
    [request] = [e for e in stored if e.WhichOneof("payload") == "experiment_delete_requested"]
    [outcome] = [e for e in stored if e.WhichOneof("payload") == "tensorboard_files_deleted"]
    assert (outcome.causation_id, outcome.correlation_id) == (request.event_id, request.correlation_id)
    assert outcome.tensorboard_files_deleted.delete_request == 1
    assert [job.delete_request for job in deleted] == [1]
    assert not folder.exists()


async def events(log: MemoryEventLog) -> list[Any]:
    return [payload_of(s.envelope) async for s in log.read(["experiment"], follow=False)]
