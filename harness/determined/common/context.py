"""The model-definition context: the user's folder, packed as a tar.gz for
upload and extracted again next to a trial.

Packing honours a ``.detignore`` (gitignore syntax) in the root of the
folder plus Determined's always-ignored patterns. Extraction trusts nothing
in the archive: it only ever writes inside the destination folder.

Symbolic links met while packing (the context folder and each -i/--include
path themselves are followed: the user named them):

- a link to a file inside the folder is packed as a copy of that file;
- a link to a folder inside the folder is packed as a link (relative), so the
  layout is kept without packing anything twice (or forever, for a loop);
- a link pointing outside the folder, one that leads nowhere, and one to
  something .detignore leaves out are skipped;
- an unreadable file, a fifo, a socket or a device is skipped.

Each followed or skipped link and each skipped file is told in
``ContextFiles.notes`` (the CLI prints them), never silently.

Kept free of pydantic and the services: the ``det`` CLI imports it."""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import posixpath
import stat
import tarfile
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, cast

from determined.common.limits import MAX_CONTEXT_BYTES

if TYPE_CHECKING:
    from pathspec import GitIgnoreSpec

MAX_EXTRACTED_SIZE = 4 * MAX_CONTEXT_BYTES
MAX_MEMBERS = 100_000
DETIGNORE = ".detignore"
# Upload pieces and file reads: large enough for few gRPC messages, small
# enough that memory does not grow with the context.
CHUNK_BYTES = 1024 * 1024
READ_BYTES = 1024 * 1024
# A file's first bytes decide whether it is deflated or stored.
SAMPLE_BYTES = 64 * 1024
HEADER_LEVEL = CONTENT_LEVEL = 6
STORED_LEVEL = 0
GZIP_WBITS = 16 + zlib.MAX_WBITS  # zlib writes a gzip member (mtime 0)
DEFAULT_IGNORES = (
    "__pycache__/", "*.py[co]", "*$py.class", "terraform", "terraform_data", "terraform.tfstate*",
    "terraform.tfvars*", ".terraform*", ".git/", ".vscode/", ".idea/", ".mypy_cache/", "/shared_fs",
)  # fmt: skip


class ContextError(Exception):
    """The context folder cannot be packed, or an archive cannot be safely extracted."""


@dataclass(frozen=True)
class _Entry:
    path: Path
    name: str  # posix path inside the archive
    is_dir: bool  # a folder, or a link to one (then `link` is set and nothing below it is packed)
    size: int
    link: str = ""  # a symbolic link's relative target (to a folder inside the context)


@dataclass(frozen=True)
class ContextFiles:
    """What a context upload will hold, checked (paths exist, names unique at
    the root, size within the limit) before a byte is sent."""

    entries: tuple[_Entry, ...]
    # What was done with links, and what was left out though .detignore does not say so.
    notes: tuple[str, ...] = ()

    @property
    def file_count(self) -> int:
        return sum(1 for entry in self.entries if not entry.is_dir)

    @property
    def content_size(self) -> int:
        return sum(entry.size for entry in self.entries)

    def archive_chunks(self, chunk_size: int = CHUNK_BYTES) -> Iterator[bytes]:
        """The tar.gz archive, built while it is read, in pieces of
        ``chunk_size`` bytes (the last one shorter): memory holds one piece
        and one read block, whatever the context's size. The same files give
        the same bytes, so an archive's hash names its content."""
        return _archive_chunks(self.entries, chunk_size)


def context_files(
    folder: Path | str | None, *, includes: Sequence[Path | str] = (), max_size: int = MAX_CONTEXT_BYTES
) -> ContextFiles:
    """The files of ``folder`` that are not ignored, plus each of ``includes``
    (a file or a folder, as Determined's ``-i/--include``) under its own name
    at the root. Raises ContextError when a path is missing, two entries would
    share a name at the root, or the files left add up to more than ``max_size``."""
    entries: list[_Entry] = []
    notes: list[str] = []
    if folder is not None:
        root = _existing(Path(folder), "context folder", must_be_dir=True)
        entries += _walk(root, "", _ignore_spec(root), _Base(root.resolve(), "the context folder"), notes)
    for include in map(Path, includes):
        entries += _included(_existing(include, "included path", must_be_dir=False), notes)
    _check_unique_roots(entries)
    _check_size(entries, max_size)
    return ContextFiles(tuple(entries), tuple(notes))


def pack_context(
    folder: Path | str | None, *, includes: Sequence[Path | str] = (), max_size: int = MAX_CONTEXT_BYTES
) -> bytes:
    """The whole tar.gz of `context_files` in memory (small contexts, tests)."""
    return b"".join(context_files(folder, includes=includes, max_size=max_size).archive_chunks())


def _existing(path: Path, what: str, *, must_be_dir: bool) -> Path:
    if not path.exists():
        raise ContextError(f"{what} {str(path)!r} does not exist")
    if must_be_dir and not path.is_dir():
        raise ContextError(f"{what} {str(path)!r} is not a directory")
    return path


def _included(path: Path, notes: list[str]) -> list[_Entry]:
    """An included folder keeps its name and its own root ``.detignore``."""
    name = path.resolve().name
    if not path.is_dir():
        return [_Entry(path, name, False, path.stat().st_size)]
    base = _Base(path.resolve(), f"the included folder {str(path)!r}", name + "/")
    inside = [
        e for e in _walk(path, name + "/", _ignore_spec(path), base, notes) if e.name != f"{name}/{DETIGNORE}"
    ]
    return [_Entry(path, name, True, 0), *inside]


def _check_unique_roots(entries: list[_Entry]) -> None:
    roots = [entry.name for entry in entries if "/" not in entry.name]
    duplicates = sorted({name for name in roots if roots.count(name) > 1})
    if duplicates:
        raise ContextError(
            f"more than one entry named {', '.join(map(repr, duplicates))} at the root of the context "
            "(the context folder and -i/--include paths must not share names)"
        )


def _ignore_spec(root: Path) -> GitIgnoreSpec:
    import pathspec  # imported here: only packing needs it

    lines = list(DEFAULT_IGNORES)
    detignore = root / DETIGNORE
    if detignore.is_file():
        lines += detignore.read_text(errors="replace").splitlines()
    return pathspec.GitIgnoreSpec.from_lines(lines)


@dataclass(frozen=True)
class _Base:
    """The folder being packed (its real path): links must stay inside it."""

    real: Path
    what: str  # for notes: "the context folder", "the included folder 'data'"
    prefix: str = ""  # its entries' names start with this in the archive


def _walk(folder: Path, prefix: str, spec: GitIgnoreSpec, base: _Base, notes: list[str]) -> list[_Entry]:
    """Entries below ``folder`` in name order; ignored directories are not entered,
    links are not followed into folders (see the module's docstring)."""
    found: list[_Entry] = []
    for child in sorted(folder.iterdir(), key=lambda path: path.name):
        name = prefix + child.name
        if name == DETIGNORE:
            continue
        try:
            info = child.lstat()
        except OSError:
            continue  # gone since it was listed
        if stat.S_ISLNK(info.st_mode):
            found += _link(child, name, spec, base, notes)
            continue
        is_dir = stat.S_ISDIR(info.st_mode)
        if spec.match_file(name + "/" if is_dir else name):
            continue
        if is_dir:
            found.append(_Entry(child, name, True, 0))
            found += _walk(child, name + "/", spec, base, notes)
        elif not stat.S_ISREG(info.st_mode):
            notes.append(f"skipped {name}: it is not a regular file (a fifo, socket or device)")
        elif not os.access(child, os.R_OK):
            notes.append(f"skipped {name}: it cannot be read")
        else:
            found.append(_Entry(child, name, False, info.st_size))
    return found


def _link(child: Path, name: str, spec: GitIgnoreSpec, base: _Base, notes: list[str]) -> list[_Entry]:
    """The entry a symbolic link found while packing makes (none when it is skipped),
    telling `notes` what was done with it."""
    shown = f"{name} -> {os.readlink(child)}"
    try:
        target = child.resolve(strict=True)
        info = target.stat()
    except (OSError, RuntimeError):  # missing, unreadable, or a loop of links
        notes.append(f"skipped the link {shown}: it leads nowhere")
        return []
    is_dir = stat.S_ISDIR(info.st_mode)
    if spec.match_file(name + "/" if is_dir else name):
        return []
    if not target.is_relative_to(base.real):
        notes.append(
            f"skipped the link {shown}: it points outside {base.what}"
            f" (add -i/--include {target} to send it as its own entry)"
        )
        return []
    inside = target.relative_to(base.real).as_posix()
    if inside != "." and spec.match_file(base.prefix + inside + ("/" if is_dir else "")):
        notes.append(f"skipped the link {shown}: it points to {inside}, which {DETIGNORE} leaves out")
        return []
    if is_dir:
        relative = os.path.relpath(target, child.parent.resolve())
        notes.append(f"packed the link {shown} as a link: it points to a folder inside {base.what}")
        return [_Entry(child, name, True, 0, link=Path(relative).as_posix())]
    if not stat.S_ISREG(info.st_mode) or not os.access(target, os.R_OK):
        notes.append(f"skipped the link {shown}: what it points to is not a readable file")
        return []
    notes.append(f"packed the link {shown} as a copy of the file it points to")
    return [_Entry(target, name, False, info.st_size)]


def _check_size(entries: list[_Entry], max_size: int) -> None:
    total = sum(entry.size for entry in entries)
    if total <= max_size:
        return
    largest = sorted((entry for entry in entries if not entry.is_dir), key=lambda e: -e.size)[:5]
    listing = "\n".join(f"  {entry.size / 2**20:.1f} MiB  {entry.name}" for entry in largest)
    raise ContextError(
        f"the context folder holds {total / 2**20:.1f} MiB after ignoring files, more than the "
        f"{max_size / 2**20:.1f} MiB allowed. Largest files (add them to {DETIGNORE} to leave them out):\n"
        + listing
    )


def _archive_chunks(entries: Sequence[_Entry], chunk_size: int) -> Iterator[bytes]:
    """A PAX tar, as tarfile writes it (header, content, padding to a block;
    two zero blocks and padding to a record at the end), written by hand so
    that a file's content can be handed on block by block."""
    out = _GzipMembers(chunk_size)
    written = 0
    for entry in entries:
        member, content = _opened(entry)
        with content or contextlib.nullcontext():
            header = member.tobuf(tarfile.PAX_FORMAT, tarfile.ENCODING, "surrogateescape")
            yield from out.write(header, HEADER_LEVEL)
            written += len(header)
            if content is not None:
                yield from _file_content(out, content, member)
                written += member.size + _padding(member.size, tarfile.BLOCKSIZE)
    end = tarfile.NUL * (2 * tarfile.BLOCKSIZE)
    end += tarfile.NUL * _padding(written + len(end), tarfile.RECORDSIZE)
    yield from out.write(end, HEADER_LEVEL)
    yield from out.close()


def _opened(entry: _Entry) -> tuple[tarfile.TarInfo, IO[bytes] | None]:
    """The entry's tar header and, for a file, its content opened for
    reading (the size is the open file's, as tarfile takes it)."""
    member = tarfile.TarInfo(entry.name)
    info = entry.path.lstat() if entry.link else entry.path.stat()
    member.mode = stat.S_IMODE(info.st_mode)
    member.mtime = int(info.st_mtime)
    if entry.link:
        member.type = tarfile.SYMTYPE
        member.linkname = entry.link
        return member, None
    if entry.is_dir:
        member.type = tarfile.DIRTYPE
        return member, None
    content = entry.path.open("rb")
    member.size = os.fstat(content.fileno()).st_size
    return member, content


def _file_content(out: _GzipMembers, content: IO[bytes], member: tarfile.TarInfo) -> Iterator[bytes]:
    left = member.size
    level = CONTENT_LEVEL
    while left > 0:
        block = content.read(min(READ_BYTES, left))
        if not block:
            raise ContextError(f"{member.name} became shorter while it was packed; try again")
        if left == member.size and len(block) >= SAMPLE_BYTES and _incompressible(block[:SAMPLE_BYTES]):
            level = STORED_LEVEL
        yield from out.write(block, level)
        left -= len(block)
    yield from out.write(tarfile.NUL * _padding(member.size, tarfile.BLOCKSIZE), level)


def _incompressible(sample: bytes) -> bool:
    """Whether deflate gains less than a tenth on this sample (weights,
    archives, media: deflate would cost ~25 MiB/s of CPU for nothing)."""
    return len(zlib.compress(sample, 1)) > 0.9 * len(sample)


def _padding(size: int, unit: int) -> int:
    return -size % unit


class _GzipMembers:
    """Gzip output as a series of gzip members (which gzip readers, tar and
    ours, read as one stream): a new member starts where the compression
    level changes, so that incompressible files are stored, not deflated.
    Hands out what it has produced in pieces of ``chunk_size`` bytes."""

    def __init__(self, chunk_size: int) -> None:
        self._chunk_size = chunk_size
        self._pending = bytearray()
        self._level: int | None = None
        self._compressor: zlib._Compress | None = None

    def write(self, data: bytes, level: int) -> Iterator[bytes]:
        if level != self._level or self._compressor is None:
            self._finish_member()
            self._compressor = zlib.compressobj(level, zlib.DEFLATED, GZIP_WBITS)
            self._level = level
        self._pending += self._compressor.compress(data)
        return self._full_chunks()

    def close(self) -> Iterator[bytes]:
        self._finish_member()
        if self._pending:
            self._pending, last = bytearray(), bytes(self._pending)
            yield last

    def _finish_member(self) -> None:
        if self._compressor is not None:
            self._pending += self._compressor.flush()
            self._compressor = None

    def _full_chunks(self) -> Iterator[bytes]:
        while len(self._pending) >= self._chunk_size:
            chunk = bytes(self._pending[: self._chunk_size])
            del self._pending[: self._chunk_size]
            yield chunk


def extract_context(
    archive: bytes | IO[bytes],
    dest: Path | str,
    *,
    max_total_size: int = MAX_EXTRACTED_SIZE,
    max_members: int = MAX_MEMBERS,
) -> None:
    """Extract a context archive (tar.gz or plain tar; in memory, or a
    seekable file, read twice and never held whole) into ``dest``, created
    if needed.

    Refuses, with ContextError and before writing anything, archives with
    absolute or ``..`` paths, links leaving the folder, device files or
    fifos, members below a link, more than ``max_members`` members or more
    than ``max_total_size`` bytes of content. Links are made last and
    checked again on disk, so nothing is ever written outside ``dest``."""
    root = Path(dest)
    root.mkdir(parents=True, exist_ok=True)
    limit = max_total_size + 2048 * max_members + 2**20  # content plus generous header room
    members = _checked_members(archive, limit, max_total_size, max_members)
    try:
        _write_members(archive, limit, members, root)
    except OSError as exc:
        raise ContextError(f"the context archive cannot be extracted: {exc}") from None


class _CappedStream(io.RawIOBase):
    """The decompressed archive, refusing to produce more than ``limit`` bytes
    (tarfile would otherwise read a huge header into memory)."""

    def __init__(self, raw: IO[bytes], limit: int) -> None:
        zipped = raw.read(2) == b"\x1f\x8b"
        raw.seek(0)
        self._source: io.BufferedIOBase = (
            gzip.GzipFile(fileobj=raw) if zipped else cast(io.BufferedIOBase, raw)
        )
        self._left = limit

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        count = self._source.readinto(buffer)
        self._left -= count
        if self._left < 0:
            raise ContextError("the context archive expands to more than its size limit")
        return count


@contextlib.contextmanager
def _stream(archive: bytes | IO[bytes], limit: int) -> Iterator[tarfile.TarFile]:
    """The archive read front to back, once (no seeking back into a bomb)."""
    raw = io.BytesIO(archive) if isinstance(archive, bytes) else archive
    raw.seek(0)
    reader = io.BufferedReader(_CappedStream(raw, limit), buffer_size=READ_BYTES)
    with tarfile.open(fileobj=reader, mode="r|") as tar:
        yield tar


def _checked_members(
    archive: bytes | IO[bytes], limit: int, max_total_size: int, max_members: int
) -> list[tarfile.TarInfo]:
    """Read every header and check it; stops at the first problem."""
    members: list[tarfile.TarInfo] = []
    files: set[str] = set()
    links: set[str] = set()
    total = 0
    try:
        with _stream(archive, limit) as tar:
            for member in tar:
                if len(members) >= max_members:
                    raise ContextError(f"the context archive has more than {max_members} entries")
                member.name = _normalised(member.name)
                _check_member(member, files, links)
                total += member.size if member.isfile() else 0
                if total > max_total_size:
                    raise ContextError(f"the context archive expands to more than {max_total_size} bytes")
                members.append(member)
                (links if member.issym() or member.islnk() else files).add(member.name)
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise ContextError(f"the context archive cannot be read: {exc}") from None
    return members


def _write_members(
    archive: bytes | IO[bytes], limit: int, members: list[tarfile.TarInfo], root: Path
) -> None:
    with _stream(archive, limit) as tar:
        for raw, member in zip(tar, members, strict=False):  # the same archive, read again in the same order
            if member.isfile():
                _write_file(tar.extractfile(raw), member, root)
            elif member.isdir():
                _safe_path(root, member.name).mkdir(parents=True, exist_ok=True)
    _make_links(members, root)
    for member in members:
        if member.isdir() or member.isfile():
            os.chmod(_safe_path(root, member.name), stat.S_IMODE(member.mode) & 0o777)


def _normalised(name: str) -> str:
    if not name or "\x00" in name or "\\" in name:
        raise ContextError(f"the context archive has an invalid path {name!r}")
    if name.startswith("/") or posixpath.isabs(name):
        raise ContextError(f"the context archive has an absolute path {name!r}")
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise ContextError(f"the context archive has a path with '..' {name!r}")
    return "/".join(parts) or "."


def _check_member(member: tarfile.TarInfo, files: set[str], links: set[str]) -> None:
    parents = member.name.split("/")[:-1]
    if any("/".join(parents[: depth + 1]) in links for depth in range(len(parents))):
        raise ContextError(f"the context archive writes {member.name!r} through a link")
    is_link = member.issym() or member.islnk()
    if member.name in links or (is_link and member.name in files):
        raise ContextError(f"the context archive has {member.name!r} twice, once as a link")
    if member.issym():
        target = posixpath.normpath(posixpath.join(posixpath.dirname(member.name), member.linkname))
        if posixpath.isabs(member.linkname) or target == ".." or target.startswith("../"):
            raise ContextError(f"the context archive has a link {member.name!r} pointing outside the folder")
    elif member.islnk():
        if _normalised(member.linkname) not in files:
            raise ContextError(f"the context archive has a hard link {member.name!r} to an unknown file")
    elif not (member.isfile() or member.isdir()):
        raise ContextError(f"the context archive has a device file or fifo {member.name!r}")


def _safe_path(root: Path, name: str) -> Path:
    """``root/name``, refusing anything whose parent resolves outside ``root``."""
    path = root / name
    if not path.parent.resolve().is_relative_to(root.resolve()):
        raise ContextError(f"the context archive entry {name!r} would be written outside the folder")
    return path


def _write_file(source: IO[bytes] | None, member: tarfile.TarInfo, root: Path) -> None:
    path = _safe_path(root, member.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    _safe_path(root, member.name)  # again, now that the parents exist
    assert source is not None  # a regular file always has content
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
    with source, os.fdopen(os.open(path, flags, 0o600), "wb") as target:
        while chunk := source.read(1 << 20):
            target.write(chunk)


def _make_links(members: list[tarfile.TarInfo], root: Path) -> None:
    real_root = root.resolve()
    for member in members:
        if not (member.issym() or member.islnk()):
            continue
        path = _safe_path(root, member.name)
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            if member.islnk():
                os.link(_safe_path(root, _normalised(member.linkname)), path)
                continue
            path.symlink_to(member.linkname)
        except OSError as exc:
            raise ContextError(f"the context archive link {member.name!r} cannot be made: {exc}") from None
        if not path.resolve().is_relative_to(real_root):
            path.unlink()
            raise ContextError(f"the context archive has a link {member.name!r} pointing outside the folder")
