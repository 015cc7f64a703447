"""`det deploy local replay BUNDLE`: a read-only cluster over the events of a bundle (`det
events export`), for a bug report or a post-mortem: nats-server and PostgreSQL as cluster-up
starts them, and a gateway with its projector that loads the bundle into its fresh log and
appends nothing (replay_gateway.py, services/gateway/read_only.py). No service decides, no
agent runs. `det deploy local cluster-down --data-dir D` stops it.

The bundle is checked whole before anything starts (replay_bundle.py) and copied into the
folder (replay_home.py), which then holds that replay only: run again on the same folder (with
the same bundle, or none), it starts the replay again without loading anything twice; another
bundle, or a folder of a cluster, is refused.
"""

import hashlib
import shutil
from dataclasses import dataclass
from pathlib import Path

from deploy.local import control, initial_password, replay_home
from deploy.local.cluster import ClusterOptions, DeployError, recorded_cluster_id
from deploy.local.replay_bundle import BundleError, Summary, check_bundle
from deploy.local.replay_home import ReplayInfo
from deploy.local.servers import free_port
from deploy.local.trial_home import TRIAL_USER_SETTING

HASH_CHUNK_BYTES = 1024 * 1024


@dataclass(frozen=True)
class Replay:
    up: control.UpResult
    info: ReplayInfo
    # What the bundle holds (None: the folder's replay was started again without its bundle).
    summary: Summary | None


def replay_up(bundle: Path | None, data_dir: Path, master_port: int) -> Replay:
    """Starts the replay of `bundle` in `data_dir` (None: the one the folder holds), or finds it
    running; DeployError naming what is wrong, with nothing started."""
    data_dir = data_dir.expanduser().resolve()
    summary = _checked(bundle) if bundle is not None else None
    info = _kept_for(bundle, summary, data_dir)
    options = ClusterOptions(
        data_dir,
        master_port=master_port,
        nats_port=free_port(),
        postgres_port=free_port(),
        gpu=False,
        settings={TRIAL_USER_SETTING: ""},  # no trial runs: no trial user is made
        replay=info.bundle,
    )
    return Replay(control.cluster_up(options), info, summary)


def _checked(bundle: Path) -> Summary:
    try:
        return check_bundle(bundle.expanduser())
    except BundleError as error:
        raise DeployError(f"{error}; nothing was started") from None


def _kept_for(bundle: Path | None, summary: Summary | None, data_dir: Path) -> ReplayInfo:
    """The replay the folder holds, made now from the bundle if it holds none."""
    kept = replay_home.kept(data_dir)
    if bundle is None or summary is None:
        if kept is None:
            raise DeployError(f"{data_dir} holds no replay: name the bundle to replay")
        return kept
    digest = _sha256(bundle.expanduser())
    if kept is not None:
        if kept.sha256 != digest:
            raise DeployError(
                f"{data_dir} holds the replay of another bundle ({kept.bundle}): stop it (det deploy local "
                f"cluster-down --data-dir {data_dir}) and remove that folder, or pick another --data-dir"
            )
        return kept
    if recorded_cluster_id(data_dir) is not None:
        raise DeployError(f"{data_dir} holds a cluster's data, not a replay's: pick another --data-dir")
    copy = "bundle.jsonl.gz" if bundle.name.endswith(".gz") else "bundle.jsonl"
    info = ReplayInfo(bundle.name, copy, digest, summary.events, initial_password.generate())
    replay_home.folder(data_dir).mkdir(mode=0o700, parents=True, exist_ok=True)
    shutil.copyfile(bundle.expanduser(), replay_home.folder(data_dir) / copy)
    replay_home.keep(data_dir, info)
    return info


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as data:
        while chunk := data.read(HASH_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()
