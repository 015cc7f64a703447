"""Which OS user a trial runs as, and the Python it runs with.

An agent that runs as root runs every trial process as the unprivileged user
`DET_AGENT_TRIAL_USER` names (`det deploy local cluster-up` gives its agents
`determined-trial`, created with `useradd --system` when missing): trial code
then cannot read the cluster's secrets (0600, the services' user's), the
services' /proc/<pid>/environ, the event log or the database files. An agent
that runs as an ordinary user cannot switch users: its trials run as that
user. A root agent given no trial user runs trials as root, and says so.

That user must be able to run a Python that imports `determined`. The
agent's own interpreter is used when the user can reach it; when it cannot
(e.g. a pyenv build under /root, mode 0700), a small virtual environment is
made beside the agent's work dir from an interpreter of the same version the
user can run (the system's /usr/bin/python3.X or /usr/local/bin/python3.X),
whose site-packages add the agent's (`trial_venv`). Nothing is copied.
"""

import subprocess
import sys
import sysconfig
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import structlog

from services.common.os_users import OsUser, OsUserError, closed_folder, ensure_system_user, may_enter

DEFAULT_TRIAL_USER = "determined-trial"
# Where an interpreter of the agent's version is looked for, in this order.
SYSTEM_BIN_DIRS = ("/usr/bin", "/usr/local/bin")
# The file in a trial venv's site-packages that adds the agent's site-packages.
SITE_FILE = "_determined_agent_site.pth"
# A trial venv is made beside the agent's work dir: <work dir><TRIAL_VENV_SUFFIX>.
TRIAL_VENV_SUFFIX = "-python"

log = structlog.get_logger()


class TrialUserError(Exception):
    """The trial user cannot be had or cannot run Python: says why."""


def trial_user_name(configured: str, *, euid: int) -> str | None:
    """The user trials run as: None when the agent is not root (it cannot
    switch: trials run as the agent's user) or none is configured, else the
    configured one. Refuses root itself."""
    if euid != 0 or not configured:
        return None
    if configured in ("root", "0"):
        raise TrialUserError("trials may not run as root: set DET_AGENT_TRIAL_USER to an unprivileged user")
    return configured


def trial_user(configured: str, *, euid: int) -> OsUser | None:
    """The user this agent runs trials as (created if missing), or None."""
    name = trial_user_name(configured, euid=euid)
    if name is None:
        return None
    try:
        user, created = ensure_system_user(name)
    except OsUserError as error:
        raise TrialUserError(str(error)) from None
    if user.uid == 0:
        raise TrialUserError(f"the OS user {name} is root: trials must run as an unprivileged user")
    if created:
        log.info("trial_user_created", user=name, uid=user.uid)
    return user


def reachable(path: Path, user: OsUser) -> bool:
    """Whether `user` may traverse every folder from / down to `path` (a folder)."""
    try:
        return closed_folder(path, user) is None
    except OSError:
        return False


def can_run(binary: Path, user: OsUser) -> bool:
    """Whether `user` may run `binary` (its real path): its folders reachable, it executable."""
    try:
        real = binary.resolve(strict=True)
        info = real.stat()
    except OSError:
        return False
    return reachable(real.parent, user) and may_enter(info.st_mode, info.st_uid, info.st_gid, user)


# -- the trial's Python -----------------------------------------------------------


@dataclass(frozen=True)
class PythonFacts:
    """What decides the trial's Python: the agent's interpreter and where it looks."""

    executable: Path
    # Where its standard library and its site-packages are.
    stdlib: Path
    site_packages: tuple[Path, ...]
    version: tuple[int, int]


def agent_python() -> PythonFacts:
    paths = sysconfig.get_paths()
    site = tuple(dict.fromkeys(Path(p) for p in (paths["purelib"], paths["platlib"])))
    return PythonFacts(Path(sys.executable), Path(paths["stdlib"]), site, sys.version_info[:2])


def interpreter_reachable(facts: PythonFacts, user: OsUser) -> bool:
    """Whether `user` can run the agent's own Python as it is."""
    return (
        can_run(facts.executable, user)
        and reachable(facts.stdlib, user)
        and all(reachable(site, user) for site in facts.site_packages)
    )


def system_candidates(version: tuple[int, int], bin_dirs: Sequence[str] = SYSTEM_BIN_DIRS) -> list[Path]:
    """Where an interpreter of `version` may be (python3.X in each folder)."""
    return [Path(folder) / f"python{version[0]}.{version[1]}" for folder in bin_dirs]


def trial_venv(folder: Path, interpreter: Path, facts: PythonFacts) -> Path:
    """Makes (or refreshes) a virtual environment in `folder` (root's, 0755)
    whose python is `interpreter` and whose site-packages add the agent's;
    returns its bin folder."""
    version = f"{facts.version[0]}.{facts.version[1]}"
    bin_dir = folder / "bin"
    site = folder / "lib" / f"python{version}" / "site-packages"
    for made in (folder, bin_dir, site.parent.parent, site.parent, site):
        made.mkdir(exist_ok=True)
        made.chmod(0o755)
    (folder / "pyvenv.cfg").write_text(
        f"home = {interpreter.parent}\ninclude-system-site-packages = false\nversion = {version}\n"
    )
    lines = "".join(f"import site; site.addsitedir({str(path)!r})\n" for path in facts.site_packages)
    (site / SITE_FILE).write_text(lines)
    for name in ("python", "python3", f"python{version}"):
        link = bin_dir / name
        link.unlink(missing_ok=True)
        link.symlink_to(interpreter)
    for written in (folder / "pyvenv.cfg", site / SITE_FILE):
        written.chmod(0o644)
    return bin_dir


def trial_python_bin_dir(user: OsUser | None, venv_folder: Path, facts: PythonFacts | None = None) -> Path:
    """The folder whose `python3` trials run: the agent's own when the trial
    user can run it (or there is no trial user), else a trial venv in
    `venv_folder` over a system interpreter of the same version, checked by
    importing `determined` as the trial user. TrialUserError: none works."""
    facts = facts or agent_python()
    if user is None or interpreter_reachable(facts, user):
        return facts.executable.parent
    candidates = [c for c in system_candidates(facts.version) if can_run(c, user)]
    if not candidates:
        raise TrialUserError(
            f"the trial user {user.name} cannot run the agent's Python ({facts.executable}: a folder on its "
            f"path is closed to it) and no python{facts.version[0]}.{facts.version[1]} it can run was found in "
            f"{', '.join(SYSTEM_BIN_DIRS)}: install one, or put the agent's Python where that user can reach it"
        )
    if not all(reachable(site, user) for site in facts.site_packages):
        raise TrialUserError(
            f"the trial user {user.name} cannot reach the agent's packages ({', '.join(map(str, facts.site_packages))})"
        )
    bin_dir = trial_venv(venv_folder, candidates[0], facts)
    check = subprocess.run(
        [str(bin_dir / "python3"), "-c", "import determined"],
        user=user.uid,
        group=user.gid,
        extra_groups=[],
        cwd="/",
        env={"PATH": "/usr/bin:/bin"},
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if check.returncode != 0:
        raise TrialUserError(
            f"the trial user {user.name} cannot import determined with {candidates[0]}: "
            f"{check.stderr.strip()[-500:]}"
        )
    log.info("trial_python", interpreter=str(candidates[0]), venv=str(venv_folder))
    return bin_dir
