"""Hostile context archives: each one is refused with its own error and
nothing is written outside the destination folder."""

from __future__ import annotations

import gzip
import io
import random
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from determined.common.context import ContextError, extract_context

Member = tuple[tarfile.TarInfo, bytes | None]


def _file(name: str, content: bytes = b"x", mode: int = 0o644) -> Member:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(content), mode
    return info, content


def _special(name: str, kind: bytes, linkname: str = "") -> Member:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, linkname
    return info, None


def _archive(*members: Member) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for info, content in members:
            tar.addfile(info, io.BytesIO(content) if content is not None else None)
    return gzip.compress(raw.getvalue())


def _huge_header() -> bytes:
    """A pax header tarfile would read whole into memory."""
    info = tarfile.TarInfo("f")
    info.pax_headers = {"comment": "x" * 2_000_000}
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(info)
    return gzip.compress(raw.getvalue())


def _many_files(count: int) -> bytes:
    return _archive(*(_file(f"f{index}") for index in range(count)))


HOSTILE: dict[str, tuple[Callable[[], bytes], str]] = {
    "absolute path": (lambda: _archive(_file("/etc/cron.d/evil")), "absolute path '/etc/cron.d/evil'"),
    "parent escape": (lambda: _archive(_file("../evil.py")), "path with '..' '../evil.py'"),
    "parent escape in the middle": (
        lambda: _archive(_file("a/../../evil.py")),
        "path with '..' 'a/../../evil.py'",
    ),
    "symlink to an absolute path": (
        lambda: _archive(_special("passwd", tarfile.SYMTYPE, "/etc/passwd")),
        "link 'passwd' pointing outside the folder",
    ),
    "symlink climbing out": (
        lambda: _archive(_special("sub/up", tarfile.SYMTYPE, "../../outside")),
        "link 'sub/up' pointing outside the folder",
    ),
    "file written through a symlink": (
        lambda: _archive(_special("link", tarfile.SYMTYPE, "."), _file("link/evil.py")),
        "writes 'link/evil.py' through a link",
    ),
    "symlink escaping through another symlink": (
        lambda: _archive(_special("here", tarfile.SYMTYPE, "."), _special("esc", tarfile.SYMTYPE, "here/..")),
        "link 'esc' pointing outside the folder",
    ),
    "hard link to a file outside": (
        lambda: _archive(_special("shadow", tarfile.LNKTYPE, "/etc/shadow")),
        "absolute path '/etc/shadow'",
    ),
    "hard link climbing out": (
        lambda: _archive(_special("h", tarfile.LNKTYPE, "../secret")),
        "path with '..' '../secret'",
    ),
    "hard link to an unknown file": (
        lambda: _archive(_special("h", tarfile.LNKTYPE, "not-in-archive")),
        "hard link 'h' to an unknown file",
    ),
    "character device": (lambda: _archive(_special("tty", tarfile.CHRTYPE)), "device file or fifo 'tty'"),
    "block device": (lambda: _archive(_special("sda", tarfile.BLKTYPE)), "device file or fifo 'sda'"),
    "fifo": (lambda: _archive(_special("pipe", tarfile.FIFOTYPE)), "device file or fifo 'pipe'"),
    "file replaced by a link": (
        lambda: _archive(_file("a.py"), _special("a.py", tarfile.SYMTYPE, "b.py")),
        "'a.py' twice, once as a link",
    ),
    "too many members": (lambda: _many_files(11), "more than 10 entries"),
    "expands too much": (
        lambda: _archive(_file("zeros", b"\0" * 4000), _file("more", b"\0" * 4000)),
        "expands to more than 5000 bytes",
    ),
    "huge header": (_huge_header, "expands to more than its size limit"),
    "not gzip at all": (lambda: b"this is not an archive", "cannot be read"),
    "truncated archive": (
        lambda: _archive(_file("big", random.Random(0).randbytes(3000)))[:500],
        "cannot be read",
    ),
    "backslash path": (lambda: _archive(_file("..\\evil.py")), "invalid path '..\\\\evil.py'"),
}


@pytest.mark.parametrize("case", list(HOSTILE), ids=list(HOSTILE))
def test_hostile_archive_is_refused(case: str, tmp_path: Path) -> None:
    build, message = HOSTILE[case]
    dest = tmp_path / "box" / "dest"

    with pytest.raises(ContextError) as raised:
        extract_context(build(), dest, max_total_size=5000, max_members=10)

    assert message in str(raised.value)
    outside = [path for path in tmp_path.rglob("*") if dest not in (path, *path.parents)]
    assert outside == [tmp_path / "box"]


def test_there_are_at_least_15_hostile_archives() -> None:
    assert len(HOSTILE) >= 15


def test_refused_archives_write_nothing_when_caught_by_the_header_check(tmp_path: Path) -> None:
    archive = _archive(_file("fine.py"), _file("../evil.py"))

    with pytest.raises(ContextError):
        extract_context(archive, tmp_path / "dest")

    assert list((tmp_path / "dest").iterdir()) == []


def test_links_that_stay_inside_are_made(tmp_path: Path) -> None:
    archive = _archive(
        _file("pkg/real.py", b"x = 1", mode=0o755),
        _special("pkg/alias.py", tarfile.SYMTYPE, "real.py"),
        _special("hard.py", tarfile.LNKTYPE, "pkg/real.py"),
        _special("top", tarfile.SYMTYPE, "pkg"),
    )

    extract_context(archive, tmp_path / "dest")

    assert (tmp_path / "dest" / "pkg" / "alias.py").read_text() == "x = 1"
    assert (tmp_path / "dest" / "hard.py").read_text() == "x = 1"
    assert (tmp_path / "dest" / "top" / "real.py").read_text() == "x = 1"


def test_dot_prefixed_names_are_fine(tmp_path: Path) -> None:
    extract_context(_archive(_file("./train.py", b"ok")), tmp_path / "dest")

    assert (tmp_path / "dest" / "train.py").read_text() == "ok"


def test_a_plain_tar_is_accepted_too(tmp_path: Path) -> None:
    extract_context(gzip.decompress(_archive(_file("a.py", b"ok"))), tmp_path / "dest")

    assert (tmp_path / "dest" / "a.py").read_text() == "ok"
