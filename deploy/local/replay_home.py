"""What makes a data folder a replay's (`det deploy local replay`, replay.py): its folder
replay/ (0700) holding a copy of the bundle, which the replay's gateway loads into the
folder's own event log (replay_gateway.py), and replay.json (0600): the bundle's name, its
SHA-256 and number of events, and the one-time password of the replay's user.

A replay's folder is never started as a cluster (refuse_cluster_up): the services that would
decide (scheduler, searcher...) would append to someone else's history.
"""

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from deploy.local.cluster import DeployError
from deploy.local.credentials import write_private

FOLDER = "replay"
INFO_FILE = "replay.json"
# The user a replay lets in (with its one-time password): an admin that sees every event,
# kept in the gateway's memory only.
REPLAY_USER = "replay"
# What the supervisor runs as the part "gateway" of a replay: it loads the bundle, then serves.
GATEWAY_MODULE = "deploy.local.replay_gateway"
# How long cluster-up waits for a replay's gateway to load and project its bundle, per event,
# on top of what it waits for any part.
LOAD_S_PER_EVENT = 0.001


@dataclass(frozen=True)
class ReplayInfo:
    # The bundle's file name, as refusals and `det master info` name the replay.
    bundle: str
    # The copy's file name in replay/ (bundle.jsonl, or bundle.jsonl.gz: read gzipped).
    copy: str
    sha256: str
    events: int
    password: str

    def gateway_environment(self, data_dir: Path) -> dict[str, str]:
        """What the replay's gateway (replay_gateway.py, then services.gateway) is given."""
        return {
            "DET_REPLAY_OF": self.bundle,
            "DET_REPLAY_BUNDLE": str(folder(data_dir) / self.copy),
            "DET_REPLAY_USER": REPLAY_USER,
            "DET_REPLAY_PASSWORD": self.password,
            "DET_CLUSTER_NAME": f"replay of {self.bundle}",
        }


def folder(data_dir: Path) -> Path:
    return data_dir / FOLDER


def kept(data_dir: Path) -> ReplayInfo | None:
    """The replay whose data `data_dir` holds; None: none."""
    try:
        return ReplayInfo(**json.loads((folder(data_dir) / INFO_FILE).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def keep(data_dir: Path, info: ReplayInfo) -> None:
    folder(data_dir).mkdir(mode=0o700, parents=True, exist_ok=True)
    write_private(folder(data_dir) / INFO_FILE, json.dumps(asdict(info)))


def gateway_environment(data_dir: Path) -> dict[str, str]:
    """The replay settings of the gateway of `data_dir` ({}: it holds no replay)."""
    info = kept(data_dir)
    return {} if info is None else info.gateway_environment(data_dir)


def loading_s(data_dir: Path) -> float:
    """The time to allow a replay's gateway for its bundle on top of its start (0: no replay)."""
    info = kept(data_dir)
    return 0.0 if info is None else info.events * LOAD_S_PER_EVENT


def refuse_cluster_up(data_dir: Path) -> None:
    """DeployError when `data_dir` holds a replay: it starts only as one."""
    info = kept(data_dir)
    if info is not None:
        raise DeployError(
            f"{data_dir} holds the replay of {info.bundle}, which only starts as a replay: "
            f"det deploy local replay --data-dir {data_dir}"
        )
