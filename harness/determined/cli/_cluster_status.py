"""Why the master does not answer, when a local cluster can say: its
supervisor records every part in `<data dir>/run/status.json` (see
deploy/local), so the CLI can tell "no cluster is running" from "the gateway
is restarting" instead of guessing.

The data folder is $DET_DATA_DIR (else the default one), or, when that one's
cluster listens elsewhere, the folder of a running supervisor whose cluster
listens at the address (`cluster-up --data-dir` elsewhere; found in /proc).

`unreachable_reason` and `cluster_expected_up` decide from what was read
(pure); `read_local_cluster` reads the files.
"""

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

START = "start one with: det deploy local cluster-up"
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1", "[::1]", "0.0.0.0")
# How a part's state reads in a sentence.
STATE_WORDS = {"backoff": "restarting", "starting": "starting", "stopped": "stopped"}
MAX_ERROR_CHARS = 300
# How a local cluster's supervisor is started (deploy/local/control.py).
SUPERVISOR_MODULE = b"deploy.local.supervisor"
DATA_DIR_FLAG = b"--data-dir"


@dataclass(frozen=True)
class LocalCluster:
    """What the data folder says: `status` is status.json (None: there is
    none), `master_port` cluster.json's (None: unknown)."""

    status: dict[str, Any] | None
    master_port: int | None
    supervisor_alive: bool
    # cluster.json's tls_cert: the master serves TLS with it ("": it does not).
    tls_cert: str = ""


def read_local_cluster(address: str) -> LocalCluster | None:
    """What this machine's data folders say about the cluster at `address`; None
    when it is not on this machine."""
    if not _is_local(address):
        return None
    configured = _read_local_cluster(_data_dir())
    if configured.master_port == _port(address):
        return configured
    for data_dir in _supervised_data_dirs():
        found = _read_local_cluster(data_dir)
        if found.master_port == _port(address):
            return found
    return configured


def cluster_expected_up(address: str, local: LocalCluster | None, tls: bool = False) -> bool:
    """Whether the local record says a cluster runs at `address` (its supervisor is alive),
    so that a master that does not answer is restarting or starting, and worth waiting for;
    False when nothing says so, or when waiting cannot help (plaintext to a TLS gateway)."""
    if local is None or local.status is None or not local.supervisor_alive:
        return False
    if local.master_port is not None and local.master_port != _port(address):
        return False
    return not (local.tls_cert and not tls)


def unreachable_reason(address: str, local: LocalCluster | None, tls: bool = False) -> str:
    generic = f"is a cluster running there? ({START})"
    if local is None:
        return generic
    if local.master_port is not None and str(local.master_port) != address.rpartition(":")[2]:
        return generic  # the data folder's cluster listens elsewhere: it says nothing about this one
    if local.status is None:
        return f"no cluster is running ({START})" if local.master_port is None else generic
    if not local.supervisor_alive:
        return f"no cluster is running: its supervisor has exited ({START})"
    parts = {str(part.get("name")): part for part in local.status.get("parts", [])}
    gateway = parts.get("gateway")
    if (gateway is None or gateway.get("state") == "running") and local.tls_cert and not tls:
        return (
            f"the gateway serves TLS only: DET_MASTER=https://{address} (and, for a self-signed "
            f"certificate, DET_MASTER_CERT_FILE={local.tls_cert})"
        )
    if gateway is None or gateway.get("state") == "running":
        return f"the gateway is running but does not answer (yet?){_others_down(parts)}"
    return f"the gateway is down ({_part_state(gateway)}){_others_down(parts)}"


def _others_down(parts: dict[str, dict[str, Any]]) -> str:
    down = [
        f"{name} ({_part_state(part)})"
        for name, part in parts.items()
        if name != "gateway" and part.get("state") != "running"
    ]
    return f"; also down: {', '.join(down)}" if down else ""


def _part_state(part: dict[str, Any]) -> str:
    """e.g. "restarting: 3 restarts, last error: exited with code 1 ... KeyError: 'x'"."""
    state = str(part.get("state", "unknown"))
    words = [STATE_WORDS.get(state, state)]
    restarts = int(part.get("restarts") or 0)
    if restarts:
        words.append(f"{restarts} restart{'s' if restarts != 1 else ''}")
    error = _short_error(str(part.get("last_error") or ""))
    if error:
        words.append(f"last error: {error}")
    return words[0] + (": " + ", ".join(words[1:]) if len(words) > 1 else "")


def _short_error(text: str) -> str:
    """The first line (how it exited) and the last (the end of its log)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    short = lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}"
    return short if len(short) <= MAX_ERROR_CHARS else short[: MAX_ERROR_CHARS - 3] + "..."


def _is_local(address: str) -> bool:
    host = address.rpartition(":")[0]
    return host in LOCAL_HOSTS or host.startswith("127.")


def _port(address: str) -> int | None:
    port = address.rpartition(":")[2]
    return int(port) if port.isdigit() else None


def _data_dir() -> Path:
    configured = os.environ.get("DET_DATA_DIR")
    return Path(configured) if configured else Path.home() / ".local" / "share" / "determined-es"


def _supervised_data_dirs() -> list[Path]:
    """The data folders of the local clusters whose supervisors run now, from their
    command lines (`python -m deploy.local.supervisor --data-dir D`); none where
    there is no /proc."""
    found = []
    try:
        pids = [entry.name for entry in os.scandir("/proc") if entry.name.isdigit()]
    except OSError:
        return []
    for pid in pids:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if SUPERVISOR_MODULE in argv and DATA_DIR_FLAG in argv[:-1]:
            found.append(Path(os.fsdecode(argv[argv.index(DATA_DIR_FLAG) + 1])))
    return found


def _read_local_cluster(data_dir: Path) -> LocalCluster:
    run = data_dir / "run"
    status = _read_json(run / "status.json")
    cluster = _read_json(run / "cluster.json")
    port = cluster.get("master_port") if cluster else None
    pid = int(status.get("supervisor_pid") or 0) if status else 0
    tls_cert = str(cluster.get("tls_cert") or "") if cluster else ""
    return LocalCluster(status, int(port) if port else None, _alive(pid), tls_cert)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: it exists
    return True
