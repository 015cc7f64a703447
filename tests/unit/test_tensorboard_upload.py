"""A trial's TensorBoard folder reaching its storage: only new and changed files, in the
background, through failures (`determined.tensorboard.Uploader`)."""

import logging
import os
import pathlib

import pytest

from determined.common import storage
from determined.common.storage import StorageError
from determined.tensorboard import Uploader


class Recording(storage.LocalStorageManager):
    """A shared_fs storage that records each upload's paths and refuses the first `failures`."""

    def __init__(self, root: pathlib.Path, failures: int = 0) -> None:
        super().__init__(root)
        self.uploads: list[list[str]] = []
        self.failures = failures

    def upload(self, src: pathlib.Path, storage_id: str, *, paths: list[str] | None = None) -> None:
        if self.failures:
            self.failures -= 1
            raise StorageError("the storage is down")
        self.uploads.append(sorted(paths or []))
        super().upload(src, storage_id, paths=paths)


@pytest.fixture
def folder(tmp_path: pathlib.Path) -> pathlib.Path:
    local = tmp_path / "local"
    (local / "plugins" / "profile").mkdir(parents=True)
    (local / "events.out.tfevents.1").write_bytes(b"abc")
    (local / "plugins" / "profile" / "host.trace.json").write_text("{}")
    return local


def stored(store: Recording) -> dict[str, bytes]:
    root = store.root / "7"
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_only_new_and_changed_files_are_uploaded(folder: pathlib.Path, tmp_path: pathlib.Path) -> None:
    store = Recording(tmp_path / "storage")
    uploader = Uploader(folder, store, "7")
    assert uploader.upload() == 2
    assert uploader.upload() == 0
    with (folder / "events.out.tfevents.1").open("ab") as events:
        events.write(b"def")
    (folder / "events.out.tfevents.2").write_bytes(b"x")
    assert uploader.upload() == 2
    assert store.uploads == [
        ["events.out.tfevents.1", "plugins/profile/host.trace.json"],
        ["events.out.tfevents.1", "events.out.tfevents.2"],
    ]
    assert stored(store) == {
        "events.out.tfevents.1": b"abcdef",
        "events.out.tfevents.2": b"x",
        "plugins/profile/host.trace.json": b"{}",
    }


def test_a_rewritten_file_of_the_same_size_is_uploaded_again(
    folder: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    store = Recording(tmp_path / "storage")
    uploader = Uploader(folder, store, "7")
    uploader.upload()
    events = folder / "events.out.tfevents.1"
    events.write_bytes(b"xyz")
    os.utime(events, ns=(1, 1))  # another mtime, whatever the clock's resolution
    assert uploader.upload() == 1
    assert stored(store)["events.out.tfevents.1"] == b"xyz"


def test_selector_and_mangler_pick_and_rename_files(folder: pathlib.Path, tmp_path: pathlib.Path) -> None:
    store = Recording(tmp_path / "storage")
    uploader = Uploader(folder, store, "7", rank=3)
    assert (
        uploader.upload(
            lambda path: path.name.endswith(".json"), lambda path, rank: path.with_suffix(f".{rank}.json")
        )
        == 1
    )
    assert stored(store) == {"plugins/profile/host.trace.3.json": b"{}"}
    assert uploader.upload() == 1  # the other file; the renamed one was uploaded already
    assert sorted(stored(store)) == ["events.out.tfevents.1", "plugins/profile/host.trace.3.json"]


def test_a_mangler_cannot_name_a_file_outside_the_folder(
    folder: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    uploader = Uploader(folder, Recording(tmp_path / "storage"), "7")
    with pytest.raises(ValueError, match="not a path inside a checkpoint"):
        uploader.upload(mangler=lambda path, rank: pathlib.Path("..") / path)


def test_links_are_not_uploaded(folder: pathlib.Path, tmp_path: pathlib.Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("not the trial's")
    (folder / "events.out.tfevents.9").symlink_to(secret)
    store = Recording(tmp_path / "storage")
    Uploader(folder, store, "7").upload()
    assert "events.out.tfevents.9" not in stored(store)


def test_requests_upload_in_the_background_and_close_waits(
    folder: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    store = Recording(tmp_path / "storage")
    uploader = Uploader(folder, store, "7")
    for size in range(1, 30):
        (folder / "events.out.tfevents.1").write_bytes(b"e" * size)
        uploader.request()
    uploader.close()
    assert stored(store)["events.out.tfevents.1"] == b"e" * 29
    assert len(store.uploads) <= 29  # requests queued behind one another are one upload
    with pytest.raises(RuntimeError, match="after the core context is closed"):
        uploader.request()


def test_a_failed_upload_leaves_its_files_to_the_next(folder: pathlib.Path, tmp_path: pathlib.Path) -> None:
    store = Recording(tmp_path / "storage", failures=1)
    uploader = Uploader(folder, store, "7")
    with pytest.raises(StorageError, match="the storage is down"):
        uploader.upload()
    assert uploader.upload() == 2


def test_a_failed_background_upload_is_logged(
    folder: pathlib.Path, tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    uploader = Uploader(folder, Recording(tmp_path / "storage", failures=1), "7")
    with caplog.at_level(logging.WARNING, "determined.tensorboard"):
        uploader.request()
        uploader.close()
    assert "could not upload TensorBoard files to" in caplog.text and "the storage is down" in caplog.text


def test_nothing_to_upload_is_no_call(tmp_path: pathlib.Path) -> None:
    store = Recording(tmp_path / "storage")
    assert Uploader(tmp_path / "never-made", store, "7").upload() == 0
    assert store.uploads == []


def test_a_storage_within_a_folder_is_rooted_there(tmp_path: pathlib.Path) -> None:
    base = storage.build({"type": "shared_fs", "host_path": str(tmp_path)})
    assert (
        base.within("tensorboard/experiment/3/trial").local_path("7")
        == tmp_path / "tensorboard/experiment/3/trial/7"
    )
    with pytest.raises(ValueError, match="has an empty, '.' or '..' component"):
        base.within("tensorboard/../..")
