"""A private /tmp for a process trial, as a container has: `python -m determined.exec.private_tmp`
says whether this machine lets this user make one (exit 0; else exit 1 and why on stdout).

In Determined each trial runs in its own container with its own /tmp; process trials of one
agent would otherwise share the machine's, and trials that write the same literal path there
(`/tmp/data-rank0`) read each other's half-written files. `enter` is run by the new trial
process itself, before it runs anything of the trial (the agent's `preexec_fn`, or a child of
the fork server): it gets a mount namespace of its own where `/tmp` is its allocation's folder
`tmp/`, inherited by whatever it starts, and gone with its last process. Of the machine's /tmp
it still sees, at their own paths, the trees that hold what the agent gives it (its
allocation's folder, its Python, its checkpoint storage: `/tmp/<first folder>` of each).

As root, that is a mount namespace alone. As another user, it is owned by a new user namespace
that maps that user and group to themselves and nothing else: the process stays who it is,
with no more rights on the machine (files of other users show as owned by `nobody`, set-uid
programs do not raise it, and it cannot change its groups).

The kernel may refuse (user namespaces off, a seccomp filter, no CAP_SYS_ADMIN in a
container): the trial then shares the machine's /tmp, gets `TMPDIR` set to its folder, and
its log says so (`shared_note`).

The C functions are looked up at import: a child of a threaded parent must not load anything
between fork and exec.
"""

import ctypes
import os
import sys
import tempfile
from collections.abc import Sequence

# The allocation's folder that becomes its /tmp (made by the agent: the trial's user's, 0700).
FOLDER = "tmp"
CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000
MNT_DETACH = 2
CAPABILITY_VERSION_3 = 0x20080522

_libc = ctypes.CDLL(None, use_errno=True)
_unshare = _libc.unshare
_unshare.argtypes = [ctypes.c_int]
_unshare.restype = ctypes.c_int
_mount = _libc.mount
_mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
_mount.restype = ctypes.c_int
_umount2 = _libc.umount2
_umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
_umount2.restype = ctypes.c_int
_capset = _libc.capset
_capset.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
_capset.restype = ctypes.c_int


def enter(folder: str, keep: Sequence[str] = ()) -> None:
    """Makes `folder` this process's /tmp, and that of every process it starts from now on;
    of the machine's /tmp, it still sees the trees that hold the `keep` paths (`kept_trees`)
    at their own paths. Must run before the process starts a thread (a user namespace needs
    a single thread). OSError: the kernel refused; the process still sees the machine's /tmp."""
    trees = kept_trees(keep)
    cwd = os.getcwd()
    _unshare_mounts()
    # Opened in the new namespace (a bind's source must be one of its mounts), before /tmp changes.
    kept = [(tree, os.open(tree, os.O_PATH | os.O_DIRECTORY)) for tree in trees]
    try:
        _check(_mount(os.fsencode(folder), b"/tmp", None, MS_BIND, None), f"binding {folder} on /tmp")
        try:
            for tree, descriptor in kept:
                os.makedirs(tree, exist_ok=True)  # in the new /tmp: the trial's own folder
                source = f"/proc/self/fd/{descriptor}".encode()
                _check(_mount(source, os.fsencode(tree), None, MS_BIND | MS_REC, None), f"binding {tree}")
            os.chdir(cwd)  # looked up again: through the new mounts
        except OSError:
            _umount2(b"/tmp", MNT_DETACH)  # all or nothing: the machine's /tmp again
            raise
    finally:
        for _, descriptor in kept:
            os.close(descriptor)
    if os.geteuid() != 0:
        _drop_capabilities()


def _drop_capabilities() -> None:
    """The capabilities a new user namespace gives its first process go: the trial could
    otherwise change its own mounts back (it would see the machine's /tmp, no more)."""
    header = (ctypes.c_uint32 * 2)(CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable; twice (64 bits): none
    _check(_capset(header, data), "dropping the user namespace's capabilities")


def kept_trees(paths: Sequence[str]) -> list[str]:
    """The folders right under the machine's /tmp that hold these paths (links resolved),
    once each; ValueError when one is /tmp itself (then /tmp cannot be private)."""
    trees: list[str] = []
    for path in paths:
        real = os.path.realpath(path)
        if real == "/tmp":
            raise ValueError(f"{path} is the machine's /tmp")
        if real.startswith("/tmp/"):
            tree = "/tmp/" + real[len("/tmp/") :].split("/")[0]
            if tree not in trees:
                trees.append(tree)
    return trees


def _unshare_mounts() -> None:
    """A mount namespace of this process's own (as root), or one owned by a new user namespace
    that maps this user and group only."""
    uid, gid = os.geteuid(), os.getegid()
    _check(_unshare(CLONE_NEWNS if uid == 0 else CLONE_NEWNS | CLONE_NEWUSER), "unshare")
    if uid != 0:
        _write("/proc/self/setgroups", "deny")  # the kernel's condition for an unprivileged gid_map
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/gid_map", f"{gid} {gid} 1")
    # Nothing mounted here may reach the machine's namespace (a shared / would propagate it).
    _check(_mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "making the mounts private")


def shared_note(why: str, tmpdir: str = "") -> str:
    """What a trial's log says when it shares the machine's /tmp."""
    note = f"determined: this trial shares the machine's /tmp with other trials (no private /tmp: {why})"
    return f"{note}; TMPDIR is {tmpdir}" if tmpdir else note


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _write(path: str, text: str) -> None:
    descriptor = os.open(path, os.O_WRONLY)
    try:
        os.write(descriptor, text.encode())
    finally:
        os.close(descriptor)


def main() -> int:
    """Tries `enter` in a child with a folder of its own (removed here, outside its namespace)."""
    folder = tempfile.mkdtemp(prefix="det-private-tmp-")
    try:
        pid = os.fork()
        if pid == 0:
            try:
                enter(folder)
            except OSError as error:
                print(error, flush=True)
                os._exit(1)
            os._exit(0)
        return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    finally:
        os.rmdir(folder)


if __name__ == "__main__":
    sys.exit(main())
