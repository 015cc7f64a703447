"""Where a local cluster's trials run and write, and who they run as.

Trial code is untrusted: it must not reach the cluster's secrets. So the
agents' work folders (one folder per allocation, `services/agent/runner.py`)
are not in the data folder but in the cluster's trial home:

    as root      /var/lib/determined-es/<key>/agents/<part>/   (root's; folders 0711)
    otherwise    ${XDG_CACHE_HOME:-~/.cache}/determined-es/<key>/agents/<part>/

(<key>: `postgres_home.cluster_key`; a folder that runs only agents for a
cluster elsewhere has no cluster.secret and keys on its data folder alone).

As root the agents run every trial as the unprivileged OS user
`determined-trial` (created by cluster-up when missing; DET_AGENT_TRIAL_USER
given to cluster-up names another, or "" for root): the data folder's
secrets (0600), the folders below (0700: the event log, the logs, the run
files, the agents' secrets) and the services' /proc/<pid>/environ are the
services' user's, and closed to it. The default checkpoint storage
(`<data dir>/checkpoints`) is made the trial user's so that trials can write
checkpoints (the gateway, root, reads them); when that user cannot reach the
data folder (e.g. under /root), it is `<trial home>/checkpoints` instead.

Not as root, the agents cannot switch users: trials run with the operator's
rights and could read whatever the operator can. cluster-up says so; their
folders still are not under the data folder, and their environment holds no
secret of the cluster's.
"""

import json
import os
import stat
from pathlib import Path

from deploy.local.postgres_home import OWNER_NOTE, SYSTEM_HOME, cluster_key
from services.agent.trial_user import DEFAULT_TRIAL_USER
from services.common.os_users import ensure_system_user

# The data folder's folders a trial has nothing to do in: made the services' user's only.
PRIVATE_FOLDERS = ("nats", "logs", "run", "agent-secrets")
# The variable that names the trial user (cluster-up's environment may set it; "": none).
TRIAL_USER_SETTING = "DET_AGENT_TRIAL_USER"


def trial_home(data_dir: Path, cluster_id: str, *, euid: int, cache_home: Path) -> Path:
    """The folder that holds the cluster's agents' work folders (see above)."""
    key = cluster_key(data_dir, cluster_id)
    return SYSTEM_HOME / key if euid == 0 else cache_home / "determined-es" / key


def default_cache_home() -> Path:
    configured = os.environ.get("XDG_CACHE_HOME")
    return Path(configured) if configured else Path.home() / ".cache"


def trial_user_name(settings: dict[str, str], *, euid: int) -> str:
    """Who the agents run trials as: "" when not root (they cannot switch);
    else DET_AGENT_TRIAL_USER as given to cluster-up (even ""), else determined-trial."""
    if euid != 0:
        return ""
    return settings.get(TRIAL_USER_SETTING, os.environ.get(TRIAL_USER_SETTING, DEFAULT_TRIAL_USER))


def open_to_others(path: Path) -> bool:
    """Whether a user who owns nothing on the way may traverse every folder from / to `path`."""
    try:
        return all(folder.stat().st_mode & stat.S_IXOTH for folder in [*reversed(path.parents), path])
    except OSError:
        return False


def checkpoint_folder(data_dir: Path, home: Path, *, trial_user: str, data_dir_open: bool) -> Path:
    """The default shared_fs checkpoint storage: `<data dir>/checkpoints`,
    unless trials run as another user who cannot reach the data folder."""
    if trial_user and not data_dir_open:
        return home / "checkpoints"
    return data_dir / "checkpoints"


def trial_user_note(user: str) -> str:
    """What cluster-up says about who trials run as; makes the user when missing (as root)."""
    if os.geteuid() != 0:
        return (
            "Trials run with your rights (cluster-up is not root, so its agents cannot switch users): "
            "trial code can read whatever you can, this cluster's secrets included"
        )
    if not user:
        return f"Trials run as root ({TRIAL_USER_SETTING} is empty): trial code can read every secret of the cluster"
    found, created = ensure_system_user(user)
    made = "created now" if created else "found"
    return (
        f"Trials run as the OS user {user} (uid {found.uid}, {made}), which cannot read the cluster's secrets"
    )


def make_folder_chain(folder: Path, top: Path, mode: int) -> None:
    """Creates `folder` and the folders between it and `top` (which exists)
    with `mode` whatever the umask; existing ones get `mode` too."""
    each = top
    for name in folder.relative_to(top).parts:
        each = each / name
        each.mkdir(exist_ok=True)
        each.chmod(mode)


def make_in_trial_home(folder: Path, data_dir: Path, cluster_id: str | None, mode: int) -> None:
    """Creates `folder`, a folder of the trial home of the cluster in
    `data_dir` (`cluster_id`; None: a folder of agents only). Under SYSTEM_HOME (as root) the folders from it down are
    root's with `mode` (SYSTEM_HOME itself 0755), and the trial home names its
    cluster (OWNER_NOTE), so that a cluster-up after its data folder is gone
    removes it (`postgres_home.prune_orphans`); elsewhere, the operator's, 0700."""
    if os.geteuid() != 0 or SYSTEM_HOME not in folder.parents:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        return
    if not SYSTEM_HOME.exists():
        SYSTEM_HOME.mkdir(parents=True)
        SYSTEM_HOME.chmod(0o755)
    make_folder_chain(folder, SYSTEM_HOME, mode)
    note = SYSTEM_HOME / folder.relative_to(SYSTEM_HOME).parts[0] / OWNER_NOTE
    if not note.exists():
        owner = {"data_dir": str(data_dir.resolve()), "cluster_id": cluster_id}
        note.write_text(json.dumps(owner) + "\n")


def prepare_folders(
    data_dir: Path, cluster_id: str | None, checkpoints: Path | None, trial_user: str
) -> None:
    """The data folder's private folders closed (0700); the default checkpoint
    storage (None: this folder has none) the trial user's (0700: only trials
    and root read it)."""
    for name in PRIVATE_FOLDERS:
        folder = data_dir / name
        if folder.is_dir():
            folder.chmod(0o700)
    if checkpoints is None:
        return
    if data_dir in checkpoints.parents:
        checkpoints.mkdir(parents=True, exist_ok=True)
    else:
        make_in_trial_home(checkpoints, data_dir, cluster_id, 0o711)
    if trial_user:
        owner, _ = ensure_system_user(trial_user)
        if checkpoints.stat().st_uid != owner.uid:
            os.chown(checkpoints, owner.uid, owner.gid)
            checkpoints.chmod(0o700)


def make_work_dir(work_dir: Path, data_dir: Path, cluster_id: str | None) -> None:
    """An agent's work folder: traversable by the trial user, listable by no one else."""
    make_in_trial_home(work_dir, data_dir, cluster_id, 0o711)
