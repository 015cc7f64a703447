"""OS users the cluster runs things as (PostgreSQL's as root, the trials'),
and what they may reach: the kernel's permission checks, done ahead so that
a folder closed to a user is named before anything fails inside it."""

import os
import pwd
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path


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
        command = ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name]
        try:
            result = subprocess.run(command, check=False, capture_output=True, text=True)
        except OSError as error:  # no useradd here
            raise OsUserError(f"cannot create the OS user {name}: {error}; create it yourself") from None
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            why = result.stderr.strip() or f"useradd exited with {result.returncode}"
            raise OsUserError(f"cannot create the OS user {name}: {why}") from None
        created = result.returncode == 0
    groups = frozenset(os.getgrouplist(entry.pw_name, entry.pw_gid))
    return OsUser(entry.pw_name, entry.pw_uid, entry.pw_gid, groups), created


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
