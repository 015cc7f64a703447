"""Determined's `modelDefinition` (a list of v1File: `path`, `type`,
`content` base64, `mode`, `mtime`) as the context archive CreateExperiment
takes (a gzip'd tar). The gateway checks the archive as it checks one from
the CLI (its size, then every member when it stores it), so this only builds it;
a path that would leave the folder is refused here too, naming the file.
"""

import base64
import binascii
import io
import tarfile
from pathlib import PurePosixPath
from typing import Any

from services.gateway.errors import InvalidArgumentError

# Determined's FileType, by name and by number, and as its 0.38 client sends it: the tar
# header's type byte (ord(tarfile.DIRTYPE), ord(tarfile.REGTYPE)).
_DIRECTORY = ("FILE_TYPE_DIRECTORY", 2, ord(tarfile.DIRTYPE))
_FILE = ("FILE_TYPE_FILE", 1, "FILE_TYPE_UNSPECIFIED", 0, None, ord(tarfile.REGTYPE))


def context_archive(files: object) -> bytes:
    """The files as a gzip'd tar (b"" for none); InvalidArgumentError naming a bad entry."""
    if files is None or files == []:
        return b""
    if not isinstance(files, list):
        raise InvalidArgumentError("modelDefinition must be a list of files ({path, type, content, mode})")
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w:gz") as tar:
        for index, entry in enumerate(files):
            member, content = _member(index, entry)
            tar.addfile(member, None if content is None else io.BytesIO(content))
    return archive.getvalue()


def _member(index: int, entry: object) -> tuple[tarfile.TarInfo, bytes | None]:
    if not isinstance(entry, dict):
        raise InvalidArgumentError(f"modelDefinition[{index}] must be an object")
    path = _relative_path(index, entry.get("path"))
    member = tarfile.TarInfo(path)
    member.mtime = _whole(index, entry, "mtime", 0)
    kind = entry.get("type")
    if kind in _DIRECTORY:
        member.type, member.mode = tarfile.DIRTYPE, _whole(index, entry, "mode", 0o755) & 0o7777
        return member, None
    if kind not in _FILE:
        raise InvalidArgumentError(
            f"modelDefinition[{index}] ({path}): type must be FILE_TYPE_FILE or FILE_TYPE_DIRECTORY"
        )
    content = _content(index, path, entry.get("content", ""))
    member.size, member.mode = len(content), _whole(index, entry, "mode", 0o644) & 0o7777
    return member, content


def _relative_path(index: int, path: object) -> str:
    if not isinstance(path, str) or not path.strip("/"):
        raise InvalidArgumentError(f"modelDefinition[{index}] needs a path")
    parts = PurePosixPath(path).parts
    if path.startswith("/") or ".." in parts:
        raise InvalidArgumentError(f"modelDefinition[{index}] ({path}): the path must stay inside the folder")
    return str(PurePosixPath(*parts))


def _content(index: int, path: str, content: object) -> bytes:
    if not isinstance(content, str):
        raise InvalidArgumentError(f"modelDefinition[{index}] ({path}): content must be base64 text")
    try:
        return base64.b64decode(content, validate=True)
    except binascii.Error as error:
        raise InvalidArgumentError(
            f"modelDefinition[{index}] ({path}): content is not base64: {error}"
        ) from error


def _whole(index: int, entry: dict[str, Any], name: str, default: int) -> int:
    value = entry.get(name, default)
    if isinstance(value, str) and value.isdigit():  # int64 fields arrive as strings in Determined's JSON
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InvalidArgumentError(f"modelDefinition[{index}]: {name} must be a whole number, not {value!r}")
    return value
