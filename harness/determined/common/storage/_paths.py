"""Names inside a checkpoint, shared by every backend: which storage ids and relative
paths are acceptable, which files a list of globs picks, and a local folder's listing.

A checkpoint's files are named by POSIX paths relative to the checkpoint; a folder is
listed as `dir/` with size 0 (as Determined lists resources), so an empty folder survives
a round trip through an object store."""

import os
import pathlib
import posixpath
import re
from collections.abc import Callable, Iterable, Mapping


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
    component, no empty one but a folder's trailing slash), else ValueError."""
    body = relpath[:-1] if isinstance(relpath, str) and relpath.endswith("/") else relpath
    if not isinstance(body, str) or not body or any(part in ("", ".", "..") for part in body.split("/")):
        raise ValueError(f"not a path inside a checkpoint: {relpath!r}")
    return relpath


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
            resources[relpath] = (pathlib.Path(dirpath) / name).stat().st_size
    return resources
