"""A file that the file system refuses to delete, for tests of partial deletions: as
root (who may delete anything a mode forbids) the file is made immutable (`chattr +i`),
otherwise its folder is made read-only. Undone on exit, so the test can clean up."""

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def undeletable(path: Path) -> Iterator[None]:
    """`path` cannot be deleted inside the block (the test is skipped where that cannot be
    arranged: root on a file system without immutable files)."""
    if os.geteuid() != 0:
        mode = path.parent.stat().st_mode
        path.parent.chmod(0o555)
        try:
            yield
        finally:
            path.parent.chmod(mode)
        return
    chattr = shutil.which("chattr")
    if (
        chattr is None
        or subprocess.run([chattr, "+i", str(path)], check=False, capture_output=True).returncode
    ):
        pytest.skip("cannot make a file undeletable here (root, and no chattr +i)")
    try:
        yield
    finally:
        subprocess.run([chattr, "-i", str(path)], check=True)
