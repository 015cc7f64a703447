"""Bounding what a part prints to a file it appends to (opened O_APPEND by
the supervisor and inherited as stdout/stderr): the supervisor copies the
file aside and empties it in place, as logrotate's `copytruncate` does, so
the writer needs no signal and carries on at the start of the file. Lines
written between the copy and the truncation are lost; these files hold
start-up errors and tracebacks, not the parts' regular logs."""

import os
import shutil
from pathlib import Path


def rotate_if_large(path: Path, max_bytes: int, keep: int) -> bool:
    """Past `max_bytes`, `path` becomes `path.1` (older copies shift up to
    `path.<keep>`, the oldest is dropped) and is emptied. Returns whether it
    rotated."""
    try:
        if path.stat().st_size <= max_bytes:
            return False
    except FileNotFoundError:
        return False
    for number in range(keep - 1, 0, -1):
        older = path.with_name(f"{path.name}.{number}")
        if older.exists():
            os.replace(older, path.with_name(f"{path.name}.{number + 1}"))
    shutil.copyfile(path, path.with_name(f"{path.name}.1"))
    os.truncate(path, 0)
    return True
