"""GetMaster's `parts`: every part of a local cluster as its supervisor last
recorded it in its status file (DET_STATUS_FILE; see deploy/local/status.py,
which writes it atomically, so it is read whole or not at all)."""

import json
from pathlib import Path
from typing import Any

from determined.proto import api_pb2


def cluster_parts(status_file: Path | None) -> list[api_pb2.ClusterPart]:
    """[] when the gateway runs without a supervisor or its file is unreadable."""
    if status_file is None:
        return []
    try:
        document = json.loads(status_file.read_text())
        return [_part(part) for part in document["parts"]]
    except (OSError, ValueError, KeyError, TypeError):
        return []


def _part(part: dict[str, Any]) -> api_pb2.ClusterPart:
    return api_pb2.ClusterPart(
        name=part["name"],
        state=part["state"],
        pid=part["pid"],
        restarts=part["restarts"],
        last_error=part["last_error"],
        started_at_ns=round(part["started_at"] * 1e6) * 1000,
        disk_bytes=part["disk_bytes"],
    )
