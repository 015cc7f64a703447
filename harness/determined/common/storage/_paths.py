"""Names inside a checkpoint, shared by every backend: which storage ids and relative
paths are acceptable, which files a list of globs picks, and a local folder's listing.

A checkpoint's files are named by POSIX paths relative to the checkpoint; a folder is
listed as `dir/` with size 0 (as Determined lists resources), so an empty folder survives
a round trip through an object store.

On a local file system (shared_fs, directory) a name inside the checkpoint is not enough:
trial code writes the checkpoint folder and could leave a link to a file of the cluster
in it. `open_checkpoint_file` is the one way a checkpoint's file is read for someone else
(the gateway's downloads, `det checkpoint download`): it refuses a symbolic link anywhere
on the way (even one pointing inside: it could be changed to point elsewhere between a
check and the read), a file with more than one hard link (it may be a cluster file linked
in; checkpoints are never written with hard links), and anything but a regular file."""

import errno
import os
import pathlib
import posixpath
import re
import stat
from collections.abc import Callable, Iterable, Mapping
from typing import BinaryIO

# Longest relative path of a checkpoint's file, and of one of its components (Linux's limits).
MAX_RELPATH_BYTES = 4096
MAX_NAME_BYTES = 255
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class UnsafeCheckpointFileError(ValueError):
    """A checkpoint's file that may lead outside the checkpoint (a link, a hard link, a
    device or fifo): never read. The message names the file."""


def check_storage_id(storage_id: str) -> str:
    """`storage_id` if it can name a checkpoint folder (one path component), else ValueError."""
    if (
        not isinstance(storage_id, str)
        or storage_id in ("", ".", "..")
        or "/" in storage_id
        or "\\" in storage_id
    ):
        raise ValueError(f"not a checkpoint storage_id: {storage_id!r}")
    return storage_id


def check_relpath(relpath: str) -> str:
    """`relpath` if it names something inside a checkpoint (relative, no `..` or `.`
    component, no empty one but a folder's trailing slash, no control character, within
    Linux's length limits), else ValueError saying which rule it breaks."""
    body = relpath[:-1] if isinstance(relpath, str) and relpath.endswith("/") else relpath
    if not isinstance(body, str) or not body:
        raise ValueError(f"not a path inside a checkpoint: {relpath!r} is empty")
    parts = body.split("/")
    if body.startswith("/"):
        problem = "is absolute"
    elif any(part in ("", ".", "..") for part in parts):
        problem = "has an empty, '.' or '..' component"
    elif _CONTROL.search(body):
        problem = "holds a control character"
    elif len(body.encode("utf-8", "surrogateescape")) > MAX_RELPATH_BYTES or any(
        len(part.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES for part in parts
    ):
        problem = f"is longer than {MAX_RELPATH_BYTES} bytes or has a name longer than {MAX_NAME_BYTES}"
    else:
        return relpath
    raise ValueError(f"not a path inside a checkpoint: {relpath[:200]!r} {problem}")


def open_checkpoint_file(root: pathlib.Path, storage_id: str, relpath: str) -> BinaryIO:
    """Checkpoint `storage_id`'s file `relpath` under storage folder `root`, opened for
    reading. Each component is opened relative to the one before without following links,
    so what is checked is what is read. Raises UnsafeCheckpointFileError naming the file
    for a symbolic link on the way (the checkpoint's folder included), a file with other
    hard links, or one that is not a regular file; FileNotFoundError when it is not there
    or is a folder; ValueError for a name that is not inside a checkpoint."""
    names = [check_storage_id(storage_id), *check_relpath(relpath).rstrip("/").split("/")]
    folder = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for depth, name in enumerate(names[:-1]):
            inner = _open_component(name, folder, os.O_DIRECTORY, names[: depth + 1], storage_id, relpath)
            os.close(folder)
            folder = inner
        handle = _open_component(names[-1], folder, os.O_NONBLOCK, names, storage_id, relpath)
    finally:
        os.close(folder)
    try:
        _check_regular_file(os.fstat(handle), storage_id, relpath)
        os.set_blocking(handle, True)
        return os.fdopen(handle, "rb")
    except BaseException:
        os.close(handle)
        raise


def _open_component(
    name: str, folder: int, flags: int, reached: list[str], storage_id: str, relpath: str
) -> int:
    try:
        return os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | flags, dir_fd=folder)
    except OSError as error:
        where = "/".join(reached[1:]) or "its folder"
        # A link met with O_NOFOLLOW: ELOOP, or ENOTDIR where a folder was asked for (Linux).
        if error.errno == errno.ELOOP or (error.errno == errno.ENOTDIR and _is_link(name, folder)):
            raise UnsafeCheckpointFileError(
                f"file {relpath!r} of checkpoint {storage_id} is refused: {where} is a symbolic link"
                " (links are never read from a checkpoint: they could lead outside it)"
            ) from None
        if error.errno == errno.ENOTDIR:
            raise FileNotFoundError(
                f"file {relpath!r} of checkpoint {storage_id}: {where} is not a folder"
            ) from None
        raise


def _is_link(name: str, folder: int) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(name, dir_fd=folder).st_mode)
    except OSError:
        return False


def _check_regular_file(info: os.stat_result, storage_id: str, relpath: str) -> None:
    if stat.S_ISDIR(info.st_mode):
        raise FileNotFoundError(f"{relpath} is a folder of checkpoint {storage_id}, not a file")
    if not stat.S_ISREG(info.st_mode):
        raise UnsafeCheckpointFileError(
            f"file {relpath!r} of checkpoint {storage_id} is refused: it is not a regular file"
        )
    if info.st_nlink > 1:
        raise UnsafeCheckpointFileError(
            f"file {relpath!r} of checkpoint {storage_id} is refused: it has {info.st_nlink} hard links"
            " (it may be a file from outside the checkpoint linked in; checkpoints are written without them)"
        )


def check_range(offset: int, chunk_bytes: int) -> None:
    """A read's `offset` (>= 0) and `chunk_bytes` (> 0), else ValueError."""
    if offset < 0 or chunk_bytes <= 0:
        raise ValueError(f"cannot read from offset {offset} in chunks of {chunk_bytes} bytes")


def check_globs(globs: Iterable[str]) -> list[str]:
    """The globs of a partial deletion, each non-empty and without `..` (ValueError)."""
    checked = []
    for glob in globs:
        if not glob or ".." in glob.split("/") or glob.startswith("/"):
            raise ValueError(f"a glob must be non-empty, relative and without '..': {glob!r}")
        checked.append(glob)
    return checked


def glob_matcher(globs: Iterable[str]) -> Callable[[str], bool]:
    """Whether a relative path matches any of `globs`: `*` and `?` stay within one folder,
    `**` spans folders (`**/*` is everything), `[...]` is a character class. A folder
    (`dir/`) is matched by its name without the slash."""
    patterns = [re.compile(_glob_regex(glob)) for glob in check_globs(globs)]

    def matches(relpath: str) -> bool:
        name = relpath.rstrip("/")
        return any(pattern.fullmatch(name) for pattern in patterns)

    return matches


def _glob_regex(glob: str) -> str:
    regex, index = "", 0
    while index < len(glob):
        if glob.startswith("**/", index):
            regex, index = regex + "(?:.*/)?", index + 3
        elif glob.startswith("**", index):
            regex, index = regex + ".*", index + 2
        elif glob[index] == "*":
            regex, index = regex + "[^/]*", index + 1
        elif glob[index] == "?":
            regex, index = regex + "[^/]", index + 1
        elif glob[index] == "[" and "]" in glob[index + 2 :]:
            end = glob.index("]", index + 2)
            body = glob[index + 1 : end]
            negate = body.startswith("!")
            body = (body[1:] if negate else body).replace("\\", "\\\\").replace("^", "\\^")
            regex += "[" + ("^" if negate else "") + body + "]"
            index = end + 1
        else:
            regex, index = regex + re.escape(glob[index]), index + 1
    return regex


def to_delete(resources: Mapping[str, int], globs: Iterable[str] | None) -> list[str]:
    """What deleting `globs` (everything when None or empty) removes from a checkpoint
    listed as `resources`: the matching files, then the matching folders left with nothing
    inside, deepest first."""
    globs = list(globs or [])
    matches = glob_matcher(globs) if globs else (lambda _relpath: True)
    files = sorted(relpath for relpath in resources if not relpath.endswith("/") and matches(relpath))
    remaining = set(resources) - set(files)
    candidates = [relpath for relpath in resources if relpath.endswith("/") and matches(relpath)]
    folders = []
    for folder in sorted(candidates, key=lambda folder: folder.count("/"), reverse=True):
        if not any(other != folder and other.startswith(folder) for other in remaining):
            folders.append(folder)
            remaining.discard(folder)
    return files + folders


def local_resources(root: pathlib.Path) -> dict[str, int]:
    """{relative path: size} of a local folder, folders as `dir/` of size 0."""
    resources: dict[str, int] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        here = pathlib.Path(dirpath).relative_to(root).as_posix()
        for name in dirnames:
            resources[f"{posixpath.join(here, name) if here != '.' else name}/"] = 0
        for name in filenames:
            relpath = posixpath.join(here, name) if here != "." else name
            resources[relpath] = _size(pathlib.Path(dirpath) / name)
    return resources


def _size(path: pathlib.Path) -> int:
    """A file's size; a link's own for a link that leads nowhere (listing never fails on it)."""
    try:
        return path.stat().st_size
    except OSError:
        return path.lstat().st_size
