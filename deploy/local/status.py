"""`<data dir>/run/status.json`: the supervisor's record of every part of a
local cluster, rewritten (atomically: a temporary file renamed over it)
whenever something changes, and at least every DISK_REFRESH_S:

    {"supervisor_pid": int, "updated_at": float unix seconds,
     "parts": [{"name", "state", "pid", "restarts", "last_error", "started_at", "disk_bytes"}]}

Read by `det deploy local status`, cluster-up, the gateway (GetMaster) and
the CLI (to say which part is down). `pid` is 0 and `started_at` is 0.0 when
there is none.
"""

import json
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

# The supervisor recomputes disk use this often (walking the data folders).
DISK_REFRESH_S = 10.0


@dataclass(frozen=True)
class PartStatus:
    name: str
    state: str
    pid: int
    restarts: int
    last_error: str
    started_at: float
    disk_bytes: int


@dataclass(frozen=True)
class ClusterStatus:
    supervisor_pid: int
    updated_at: float
    parts: tuple[PartStatus, ...]

    def part(self, name: str) -> PartStatus:
        return next(part for part in self.parts if part.name == name)

    def to_json(self) -> dict[str, Any]:
        return {"supervisor_pid": self.supervisor_pid, "updated_at": self.updated_at,
                "parts": [asdict(part) for part in self.parts]}


def status_path(data_dir: Path) -> Path:
    return data_dir / "run" / "status.json"


def write_status(path: Path, status: ClusterStatus) -> None:
    write_atomically(path, json.dumps(status.to_json(), indent=2))


def write_atomically(path: Path, text: str) -> None:
    """Readers see the old content or the new, never a part of it."""
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    partial.write_text(text)
    partial.replace(path)


def read_status(path: Path) -> ClusterStatus | None:
    """None when there is no status file (no supervisor ever ran there, or
    cluster-down removed it)."""
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    known = {f.name for f in fields(PartStatus)}
    parts = tuple(PartStatus(**{k: v for k, v in part.items() if k in known}) for part in document["parts"])
    return ClusterStatus(int(document["supervisor_pid"]), float(document["updated_at"]), parts)


def disk_bytes(paths: list[Path]) -> int:
    """Bytes the files under `paths` (files or folders) take; what vanishes
    while it is counted counts nothing."""
    total = 0
    for path in paths:
        try:
            if path.is_dir():
                total += sum(_size(Path(root) / name) for root, _, names in os.walk(path) for name in names)
            elif path.exists():
                total += _size(path)
        except OSError:
            continue
    return total


def _size(path: Path) -> int:
    try:
        return path.lstat().st_blocks * 512
    except OSError:
        return 0
