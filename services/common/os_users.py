"""OS users the cluster runs things as (PostgreSQL's as root, the trials'),
and what they may reach: the kernel's permission checks, done ahead so that
a folder closed to a user is named before anything fails inside it."""

import os
import pwd
import stat
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

# useradd refuses at once while another useradd holds the password file's lock (two
# cluster-ups at once): it is tried again meanwhile.
USERADD_ATTEMPTS = 20
USERADD_RETRY_S = 0.25


class OsUserError(Exception):
    """A user that cannot be made: says why."""


@dataclass(frozen=True)
class OsUser:
    name: str
    uid: int
    gid: int
    groups: frozenset[int]


def ensure_system_user(name: str) -> tuple[OsUser, bool]:
    """The OS user `name`, created (`useradd --system`, no home, no login
    shell) when missing; returns it and whether it was created now. Run as
    root. One made meanwhile by another process is taken as found."""
    created = False
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        result = _useradd(name)
        for _ in range(USERADD_ATTEMPTS):
            if result.returncode == 0 or "lock" not in result.stderr or _exists(name):
                break
            time.sleep(USERADD_RETRY_S)
            result = _useradd(name)
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            why = result.stderr.strip() or f"useradd exited with {result.returncode}"
            raise OsUserError(f"cannot create the OS user {name}: {why}") from None
        created = result.returncode == 0
    groups = frozenset(os.getgrouplist(entry.pw_name, entry.pw_gid))
    return OsUser(entry.pw_name, entry.pw_uid, entry.pw_gid, groups), created


def _useradd(name: str) -> "subprocess.CompletedProcess[str]":
    command = ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name]
    try:
        return subprocess.run(command, check=False, capture_output=True, text=True)
    except OSError as error:  # no useradd here
        raise OsUserError(f"cannot create the OS user {name}: {error}; create it yourself") from None


def _exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def may_enter(mode: int, owner: int, group: int, user: OsUser) -> bool:
    """Whether `user` may traverse a folder (or run a file) with this mode and
    owner (the owner's bits, else the group's, else the others', as the kernel
    decides)."""
    if owner == user.uid:
        return bool(mode & stat.S_IXUSR)
    if group in user.groups:
        return bool(mode & stat.S_IXGRP)
    return bool(mode & stat.S_IXOTH)


def closed_folder(path: Path, user: OsUser) -> Path | None:
    """The first folder from / down to `path` (a folder) that `user` cannot
    traverse, if any."""
    for folder in [*reversed(path.parents), path]:
        info = folder.stat()
        if not may_enter(info.st_mode, info.st_uid, info.st_gid, user):
            return folder
    return None
