"""Symbolic links met while a context is packed: followed, packed as links or skipped,
and each told in ContextFiles.notes (the CLI prints them), never silently."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from determined.cli import experiment as cli_experiment
from determined.common.context import context_files, extract_context


def _members(files: object) -> dict[str, tarfile.TarInfo]:
    archive = b"".join(files.archive_chunks())  # type: ignore[attr-defined]
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        return {member.name: member for member in tar}


@pytest.fixture
def context(tmp_path: Path) -> Path:
    """A context folder beside a data folder holding the cluster's secret."""
    (tmp_path / "data" / "dataset").mkdir(parents=True)
    (tmp_path / "data" / "cluster.secret").write_text("secret")
    (tmp_path / "data" / "dataset" / "x.csv").write_text("1")
    source = tmp_path / "ctx"
    (source / "sub").mkdir(parents=True)
    (source / "train.py").write_text("print(1)")
    (source / "sub" / "a.py").write_text("a")
    (source / ".detignore").write_text("private.env\n")
    (source / "private.env").write_text("TOKEN=1")
    return source


def test_a_link_to_a_file_outside_is_skipped_and_said(context: Path, tmp_path: Path) -> None:
    (context / "leak").symlink_to(tmp_path / "data" / "cluster.secret")
    files = context_files(context)
    assert "leak" not in _members(files)
    secret = tmp_path / "data" / "cluster.secret"
    assert files.notes == (
        (
            f"skipped the link leak -> {secret}: it points outside the context folder"
            f" (add -i/--include {secret} to send it as its own entry)"
        ),
    )


def test_a_relative_link_climbing_out_is_skipped(context: Path) -> None:
    (context / "sub" / "up").symlink_to("../../data/cluster.secret")
    files = context_files(context)
    assert "sub/up" not in _members(files)
    assert files.notes[0].startswith(
        "skipped the link sub/up -> ../../data/cluster.secret: it points outside"
    )


def test_a_link_to_a_folder_outside_is_skipped_and_said(context: Path, tmp_path: Path) -> None:
    (context / "dataset").symlink_to(tmp_path / "data" / "dataset")
    files = context_files(context)
    assert not any(name.startswith("dataset") for name in _members(files))
    assert (
        "skipped the link dataset" in files.notes[0] and "points outside the context folder" in files.notes[0]
    )


def test_a_link_to_a_file_inside_is_packed_as_a_copy(context: Path, tmp_path: Path) -> None:
    (context / "alias.py").symlink_to("train.py")
    files = context_files(context)
    member = _members(files)["alias.py"]
    assert member.isfile() and member.size == len("print(1)")
    assert files.notes == ("packed the link alias.py -> train.py as a copy of the file it points to",)
    extract_context(b"".join(files.archive_chunks()), tmp_path / "out")
    assert (tmp_path / "out" / "alias.py").read_text() == "print(1)"


def test_a_link_to_a_folder_inside_is_packed_as_a_link(context: Path, tmp_path: Path) -> None:
    (context / "lib").symlink_to("sub")
    (context / "sub" / "here").symlink_to(".")
    files = context_files(context)
    members = _members(files)
    assert members["lib"].issym() and members["lib"].linkname == "sub"
    assert members["sub/here"].issym() and members["sub/here"].linkname == "."
    assert "lib/a.py" not in members  # the folder's files are packed once, under their own names
    assert (
        "packed the link lib -> sub as a link: it points to a folder inside the context folder" in files.notes
    )
    extract_context(b"".join(files.archive_chunks()), tmp_path / "out")
    assert (tmp_path / "out" / "lib" / "a.py").read_text() == "a"


def test_an_absolute_link_inside_is_packed_relative(context: Path) -> None:
    (context / "lib").symlink_to(context / "sub")
    assert _members(context_files(context))["lib"].linkname == "sub"


def test_a_link_to_an_ignored_file_is_skipped(context: Path) -> None:
    (context / "settings.env").symlink_to("private.env")
    files = context_files(context)
    assert "settings.env" not in _members(files)
    assert files.notes == (
        "skipped the link settings.env -> private.env: it points to private.env, which .detignore leaves out",
    )


def test_a_link_that_leads_nowhere_is_skipped_and_said(context: Path) -> None:
    (context / "dangling").symlink_to("missing.py")
    (context / "loop").symlink_to("loop")
    files = context_files(context)
    assert {"dangling", "loop"}.isdisjoint(_members(files))
    assert files.notes == (
        "skipped the link dangling -> missing.py: it leads nowhere",
        "skipped the link loop -> loop: it leads nowhere",
    )


def test_an_ignored_link_is_left_out_without_a_note(context: Path, tmp_path: Path) -> None:
    (context / "private.env").unlink()
    (context / "private.env").symlink_to(tmp_path / "data" / "cluster.secret")
    files = context_files(context)
    assert "private.env" not in _members(files) and files.notes == ()


def test_a_fifo_is_skipped_and_said(context: Path) -> None:
    os.mkfifo(context / "pipe")
    files = context_files(context)
    assert "pipe" not in _members(files)
    assert files.notes == ("skipped pipe: it is not a regular file (a fifo, socket or device)",)


def test_links_in_an_included_folder_stay_inside_it(context: Path, tmp_path: Path) -> None:
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "z.py").write_text("z")
    (extra / "zl.py").symlink_to("z.py")
    (extra / "train.py").symlink_to(context / "train.py")  # inside the context, outside the included folder
    files = context_files(context, includes=[extra])
    members = _members(files)
    assert members["extra/zl.py"].isfile() and "extra/train.py" not in members
    assert f"points outside the included folder {str(extra)!r}" in files.notes[0]


def test_the_folder_and_includes_named_are_followed(context: Path, tmp_path: Path) -> None:
    (tmp_path / "ctx-link").symlink_to(context)
    (tmp_path / "secret-link").symlink_to(tmp_path / "data" / "cluster.secret")
    files = context_files(tmp_path / "ctx-link", includes=[tmp_path / "secret-link"])
    assert {"train.py", "cluster.secret"} <= set(_members(files)) and files.notes == ()


def test_the_cli_prints_the_notes(context: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (context / "leak").symlink_to(tmp_path / "data" / "cluster.secret")
    assert cli_experiment.prepare_context(context, []) is not None
    assert "note: skipped the link leak -> " in capsys.readouterr().err
