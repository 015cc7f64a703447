"""A checkpoint's files are read for someone else (the gateway's downloads, `det checkpoint
download`) only when they are safely inside the checkpoint: never through a symbolic link,
never a file with other hard links, never a fifo; and the names a trial reports are
relative paths inside it."""

from __future__ import annotations

import os
import pathlib

import pytest

from determined.common import storage
from determined.common.storage import UnsafeCheckpointFileError, check_relpath, open_checkpoint_file
from determined.proto import api_pb2
from services.gateway.errors import InvalidArgumentError
from services.gateway.features.checkpoints import commands as checkpoint_commands

ID = "c-1"


@pytest.fixture
def layout(tmp_path: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """(storage root holding checkpoint c-1 with model.pt and sub/state.json, the cluster's data folder)."""
    root, data = tmp_path / "checkpoints", tmp_path / "data"
    (root / ID / "sub").mkdir(parents=True)
    (root / ID / "model.pt").write_bytes(b"weights")
    (root / ID / "sub" / "state.json").write_bytes(b"{}")
    data.mkdir()
    (data / "cluster.secret").write_bytes(b"the secret")
    return root, data


def test_a_plain_file_is_read(layout: tuple[pathlib.Path, pathlib.Path]) -> None:
    root, _ = layout
    with open_checkpoint_file(root, ID, "sub/state.json") as handle:
        assert handle.read() == b"{}"


def test_a_link_to_a_file_outside_is_refused_naming_it(layout: tuple[pathlib.Path, pathlib.Path]) -> None:
    root, data = layout
    (root / ID / "leak").symlink_to(data / "cluster.secret")
    with pytest.raises(
        UnsafeCheckpointFileError, match="file 'leak' of checkpoint c-1 is refused: leak is a symbolic link"
    ):
        open_checkpoint_file(root, ID, "leak")


def test_a_link_inside_the_checkpoint_is_refused_too(layout: tuple[pathlib.Path, pathlib.Path]) -> None:
    root, _ = layout
    (root / ID / "latest").symlink_to("model.pt")
    with pytest.raises(UnsafeCheckpointFileError, match="symbolic link"):
        open_checkpoint_file(root, ID, "latest")


def test_a_linked_folder_on_the_way_is_refused(layout: tuple[pathlib.Path, pathlib.Path]) -> None:
    root, data = layout
    (root / ID / "config").symlink_to(data)
    with pytest.raises(UnsafeCheckpointFileError, match="config is a symbolic link"):
        open_checkpoint_file(root, ID, "config/cluster.secret")


def test_a_checkpoint_folder_that_is_a_link_is_refused(layout: tuple[pathlib.Path, pathlib.Path]) -> None:
    root, data = layout
    (root / "c-2").symlink_to(data)
    with pytest.raises(UnsafeCheckpointFileError, match="its folder is a symbolic link"):
        open_checkpoint_file(root, "c-2", "cluster.secret")


def test_a_hard_link_is_refused(layout: tuple[pathlib.Path, pathlib.Path]) -> None:
    root, data = layout
    os.link(data / "cluster.secret", root / ID / "copy")
    with pytest.raises(UnsafeCheckpointFileError, match="has 2 hard links"):
        open_checkpoint_file(root, ID, "copy")


def test_a_fifo_is_refused_without_blocking(layout: tuple[pathlib.Path, pathlib.Path]) -> None:
    root, _ = layout
    os.mkfifo(root / ID / "pipe")
    with pytest.raises(UnsafeCheckpointFileError, match="not a regular file"):
        open_checkpoint_file(root, ID, "pipe")


def test_missing_files_and_folders_are_not_found(layout: tuple[pathlib.Path, pathlib.Path]) -> None:
    root, _ = layout
    for relpath in ("nope", "sub", "model.pt/x", "nope/x"):
        with pytest.raises(FileNotFoundError):
            open_checkpoint_file(root, ID, relpath)
    with pytest.raises(ValueError, match="'..' component"):
        open_checkpoint_file(root, ID, "../c-1/model.pt")


def test_the_local_backend_reads_and_downloads_through_the_check(
    layout: tuple[pathlib.Path, pathlib.Path], tmp_path: pathlib.Path
) -> None:
    root, data = layout
    manager = storage.build({"type": "shared_fs", "host_path": str(root)})
    assert b"".join(manager.read(ID, "model.pt")) == b"weights"
    manager.download(ID, tmp_path / "whole")
    assert (tmp_path / "whole" / "sub" / "state.json").read_bytes() == b"{}"
    (root / ID / "leak").symlink_to(data / "cluster.secret")
    with pytest.raises(UnsafeCheckpointFileError, match="'leak'"):
        manager.read(ID, "leak")
    with pytest.raises(UnsafeCheckpointFileError, match="'leak'"):
        manager.download(ID, tmp_path / "again")
    assert not (tmp_path / "again" / "leak").exists()
    manager.download(ID, tmp_path / "some", selector=lambda relpath: relpath != "leak")
    assert (tmp_path / "some" / "model.pt").read_bytes() == b"weights"


def test_a_listing_survives_a_link_that_leads_nowhere(layout: tuple[pathlib.Path, pathlib.Path]) -> None:
    root, _ = layout
    (root / ID / "gone").symlink_to("missing")
    assert storage.local_resources(root / ID)["gone"] == len("missing")


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("", "is empty"),
        ("/etc/passwd", "is absolute"),
        ("../escape", "'..' component"),
        ("a/../../escape", "'..' component"),
        ("a//b", "empty, '.' or '..' component"),
        ("./a", "'.'"),
        ("a\nb", "control character"),
        ("a\x00b", "control character"),
        ("x" * 256, "longer than"),
    ],
)
def test_odd_names_are_not_inside_a_checkpoint(name: str, problem: str) -> None:
    with pytest.raises(ValueError, match="not a path inside a checkpoint") as raised:
        check_relpath(name)
    assert problem in str(raised.value)


@pytest.mark.parametrize("name", ["model.pt", "sub/", "sub/state.json", "é/ü.bin", ".hidden", "a..b"])
def test_ordinary_names_are_fine(name: str) -> None:
    assert check_relpath(name) == name


def _reported(uuid: str, resources: dict[str, int]) -> api_pb2.ReportCheckpointRequest:
    return api_pb2.ReportCheckpointRequest(uuid=uuid, trial_id=1, allocation_id="1.1", resources=resources)


@pytest.mark.parametrize(
    ("uuid", "resources", "expected"),
    [
        (
            "c-1",
            {"model.pt": 1, "../../cluster.secret": 10},
            "checkpoint c-1 lists the file '../../cluster.secret'",
        ),
        (
            "c-1",
            {"/etc/passwd": 10},
            "checkpoint c-1 lists the file '/etc/passwd': not a path inside a checkpoint",
        ),
        ("c-1", {"": 0}, "checkpoint c-1 lists the file '': not a path inside a checkpoint: '' is empty"),
        ("c-1", {"a\x00b": 1}, "control character"),
        ("c-1", {"model.pt": -1}, "checkpoint c-1 lists 'model.pt' with a negative size (-1)"),
        ("../data", {"model.pt": 1}, "checkpoint uuid '../data' cannot name a checkpoint's folder"),
        ("a/b", {"model.pt": 1}, "cannot name a checkpoint's folder"),
    ],
)
def test_report_checkpoint_refuses_odd_names(uuid: str, resources: dict[str, int], expected: str) -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        checkpoint_commands.checkpoint_reported(_reported(uuid, resources), experiment_id=1, reported_at_ns=1)
    assert expected in str(raised.value)


def test_report_checkpoint_takes_ordinary_names() -> None:
    append = checkpoint_commands.checkpoint_reported(
        _reported("c-1", {"model.pt": 5, "sub/": 0, "sub/state.json": 2}), experiment_id=1, reported_at_ns=1
    )
    assert dict(append.payload.resources) == {"model.pt": 5, "sub/": 0, "sub/state.json": 2}
