"""A TensorBoard task's local copy of its trials' files (`determined.tensorboard.Fetcher`) from
shared_fs storage, and the sources file it reads. S3: tests/integration/test_tensorboard_sync.py."""

import json
import logging
import pathlib
from typing import Any

import pytest

from determined.tensorboard import Fetcher, Source, read_sources


def trial_folder(root: pathlib.Path, experiment_id: int, trial_id: int) -> pathlib.Path:
    folder = root / "tensorboard" / "experiment" / str(experiment_id) / "trial" / str(trial_id)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
def storage_root(tmp_path: pathlib.Path) -> pathlib.Path:
    root = tmp_path / "storage"
    (trial_folder(root, 1, 1) / "events.out.tfevents.a").write_bytes(b"one")
    (trial_folder(root, 1, 1) / "eval").mkdir()
    (trial_folder(root, 1, 1) / "eval" / "events.out.tfevents.b").write_bytes(b"two")
    (trial_folder(root, 1, 2) / "events.out.tfevents.c").write_bytes(b"not shown")
    (trial_folder(root, 2, 5) / "events.out.tfevents.d").write_bytes(b"five")
    return root


def section(root: pathlib.Path) -> dict[str, Any]:
    return {"type": "shared_fs", "host_path": str(root)}


def copies(root: pathlib.Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_the_chosen_trials_are_copied_as_runs_of_their_own(
    storage_root: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    sources = [Source(1, 1, section(storage_root)), Source(2, 5, section(storage_root))]
    fetcher = Fetcher(sources, tmp_path / "copy")
    assert fetcher.refresh() == 3
    assert copies(tmp_path / "copy") == {
        "experiment/1/trial/1/events.out.tfevents.a": b"one",
        "experiment/1/trial/1/eval/events.out.tfevents.b": b"two",
        "experiment/2/trial/5/events.out.tfevents.d": b"five",
    }


def test_a_refresh_copies_new_files_and_the_growth_of_others(
    storage_root: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    fetcher = Fetcher([Source(1, 1, section(storage_root))], tmp_path / "copy")
    fetcher.refresh()
    assert fetcher.refresh() == 0
    with (trial_folder(storage_root, 1, 1) / "events.out.tfevents.a").open("ab") as events:
        events.write(b" more")
    (trial_folder(storage_root, 1, 1) / "events.out.tfevents.e").write_bytes(b"new")
    assert fetcher.refresh() == 2
    assert copies(tmp_path / "copy")["experiment/1/trial/1/events.out.tfevents.a"] == b"one more"
    assert copies(tmp_path / "copy")["experiment/1/trial/1/events.out.tfevents.e"] == b"new"
    (trial_folder(storage_root, 1, 1) / "events.out.tfevents.a").write_bytes(b"1")  # replaced, shorter
    assert fetcher.refresh() == 1
    assert copies(tmp_path / "copy")["experiment/1/trial/1/events.out.tfevents.a"] == b"1"


def test_a_trial_without_files_yet_is_no_error(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    fetcher = Fetcher([Source(9, 9, section(tmp_path / "empty"))], tmp_path / "copy")
    with caplog.at_level(logging.WARNING, "determined.tensorboard"):
        assert fetcher.refresh() == 0
    assert caplog.text == ""


def test_a_bad_source_is_logged_once_and_the_others_copied(
    storage_root: pathlib.Path, tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    sources = [Source(1, 1, {"type": "tape"}), Source(2, 5, section(storage_root))]
    fetcher = Fetcher(sources, tmp_path / "copy")
    with caplog.at_level(logging.WARNING, "determined.tensorboard"):
        assert fetcher.refresh() == 1
        assert fetcher.refresh() == 0
    assert (
        caplog.text.count("experiment 1's TensorBoard files cannot be listed: checkpoint_storage.type") == 1
    )
    assert "tried again every refresh" in caplog.text


def test_a_link_in_the_storage_is_not_followed(
    storage_root: pathlib.Path, tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    secret = tmp_path / "secret"
    secret.write_text("someone else's")
    (trial_folder(storage_root, 1, 1) / "events.out.tfevents.z").symlink_to(secret)
    fetcher = Fetcher([Source(1, 1, section(storage_root))], tmp_path / "copy")
    with caplog.at_level(logging.WARNING, "determined.tensorboard"):
        assert fetcher.refresh() == 2
    assert "trial/1/events.out.tfevents.z cannot be copied" in caplog.text and "symbolic link" in caplog.text
    assert "experiment/1/trial/1/events.out.tfevents.z" not in copies(tmp_path / "copy")


def write_sources(tmp_path: pathlib.Path, value: Any) -> pathlib.Path:
    path = tmp_path / "sources.json"
    path.write_text(json.dumps(value))
    return path


def test_the_sources_file_is_read(tmp_path: pathlib.Path) -> None:
    storage = {"type": "s3", "bucket": "b"}
    path = write_sources(tmp_path, [{"experiment_id": 1, "trial_id": 2, "storage": storage}])
    assert read_sources(path) == [Source(1, 2, storage)]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"experiment_id": 1}, "must hold a list"),
        (["x"], "source 0 must be an object, got str"),
        ([{"experiment_id": True, "trial_id": 2, "storage": {"type": "s3"}}], "positive integers"),
        ([{"experiment_id": 1, "trial_id": 0, "storage": {"type": "s3"}}], "positive integers"),
        ([{"experiment_id": 1, "trial_id": 2}], "checkpoint storage section"),
        ([{"experiment_id": 1, "trial_id": 2, "storage": {"bucket": "b"}}], "checkpoint storage section"),
    ],
)
def test_a_bad_sources_file_is_refused_with_what_is_wrong(
    tmp_path: pathlib.Path, value: Any, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        read_sources(write_sources(tmp_path, value))


def test_a_sources_file_that_is_not_json_is_refused(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "sources.json"
    path.write_text("[{")
    with pytest.raises(ValueError, match="is not JSON"):
        read_sources(path)
