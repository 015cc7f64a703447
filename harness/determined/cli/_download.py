"""Downloading a checkpoint: the one implementation behind `det checkpoint
download` and the SDK's `Checkpoint.download`.

- direct: from the storage itself (`determined.common.storage`), which needs
  this machine to reach it: for shared_fs the same path as on the agents, for
  s3 the endpoint and credentials (its own, or the standard chain).
- master: every file streamed by the gateway (DownloadCheckpointFile). It
  resumes: a file already whole here is skipped, a partial one continues from
  its size, both when the stream breaks and when the download is run again.
- auto: direct, then through the master when the storage cannot be reached or
  read from here (its library missing, the path absent, the endpoint down, a
  file missing or short). What the direct attempt left is kept: the master
  download resumes from it.

The checkpoint's recorded resources say what a whole download holds
(directories as `dir/`, files with their sizes); a download is checked
against them whichever way it went. Either way a file that may lead outside
the checkpoint (a symbolic link, a hard link: `storage.open_checkpoint_file`)
stops the download with an error naming it.
"""

from __future__ import annotations

import enum
import json
import pathlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from determined.cli._client import CliError, Gateway, MasterUnavailableError
from determined.common.states import CheckpointState

if TYPE_CHECKING:
    from determined.proto import api_pb2

# relpath -> bool: which files to download (directories are always made).
Selector = Callable[[str], bool]

# How long a master download waits for a gateway that stopped answering before giving up (a
# run again resumes where it stopped); any byte received starts the wait again.
RESUME_FOR_S = 30.0
RESUME_INTERVAL_S = 0.5


class DownloadMode(enum.Enum):
    AUTO = "auto"
    DIRECT = "direct"
    MASTER = "master"


class _DirectFailed(Exception):
    """The storage could not be read from here; the message says why."""


def download(
    gateway: Gateway,
    checkpoint: api_pb2.Checkpoint,
    dst: pathlib.Path,
    mode: DownloadMode = DownloadMode.AUTO,
    *,
    selector: Selector | None = None,
    say: Callable[[str], None] = lambda _message: None,
) -> pathlib.Path:
    """Downloads `checkpoint`'s files (those `selector` accepts) into folder
    `dst` and returns it. `say` is told when auto falls back to the master."""
    if checkpoint.state == CheckpointState.DELETED:
        raise CliError(f"checkpoint {checkpoint.uuid} was deleted: its files are gone from the storage")
    dst.mkdir(parents=True, exist_ok=True)
    if mode is DownloadMode.MASTER:
        _through_master(gateway, checkpoint, dst, selector)
        return dst
    try:
        _direct(checkpoint, dst, selector)
    except _DirectFailed as failure:
        kind = _storage_type(checkpoint)
        if mode is DownloadMode.DIRECT:
            raise CliError(
                f"could not download checkpoint {checkpoint.uuid} from its {kind} storage: {failure} "
                "(--mode master downloads it through the master)"
            ) from None
        say(
            f"could not read checkpoint {checkpoint.uuid} from its {kind} storage here ({failure}); "
            "downloading it through the master"
        )
        _through_master(gateway, checkpoint, dst, selector)
    return dst


def _storage_type(checkpoint: api_pb2.Checkpoint) -> str:
    try:
        return str(json.loads(checkpoint.storage_json or "{}").get("type") or "unknown")
    except (ValueError, AttributeError):
        return "unknown"


def _direct(checkpoint: api_pb2.Checkpoint, dst: pathlib.Path, selector: Selector | None) -> None:
    from determined.common import storage

    if not checkpoint.storage_json:
        raise _DirectFailed("the master did not say which storage holds it")
    try:
        manager = storage.build(json.loads(checkpoint.storage_json))
        manager.download(checkpoint.uuid, dst, selector=selector)
    except storage.UnsafeCheckpointFileError as refused:  # the master refuses it too: no fallback
        raise CliError(f"could not download checkpoint {checkpoint.uuid}: {refused}") from None
    except Exception as failure:  # any backend's failure to read means "not from here"
        raise _DirectFailed(f"{type(failure).__name__}: {failure}") from failure
    short = _incomplete(checkpoint, dst, selector)
    if short:
        raise _DirectFailed(f"{short} is missing or not its recorded size")


def _incomplete(checkpoint: api_pb2.Checkpoint, dst: pathlib.Path, selector: Selector | None) -> str:
    """The first recorded file that is not here at its recorded size ("" when none)."""
    for relpath, size in sorted(_wanted(checkpoint, selector).items()):
        target = inside(dst, relpath)
        if relpath.endswith("/"):
            target.mkdir(parents=True, exist_ok=True)
        elif not target.is_file() or target.stat().st_size != size:
            return relpath
    return ""


def _wanted(checkpoint: api_pb2.Checkpoint, selector: Selector | None) -> dict[str, int]:
    return {
        relpath: size
        for relpath, size in checkpoint.resources.items()
        if relpath.endswith("/") or selector is None or selector(relpath)
    }


def inside(dst: pathlib.Path, relpath: str) -> pathlib.Path:
    """Where a checkpoint's file goes under `dst`; CliError for a name that is not
    inside a checkpoint (absolute, climbing with .., odd: `storage.check_relpath`)."""
    from determined.common import storage

    try:
        storage.check_relpath(relpath)
    except ValueError as problem:
        raise CliError(
            f"the checkpoint lists a file outside its folder: {relpath[:200]!r} ({problem})"
        ) from None
    return dst.joinpath(*relpath.rstrip("/").split("/"))


def _through_master(
    gateway: Gateway, checkpoint: api_pb2.Checkpoint, dst: pathlib.Path, selector: Selector | None
) -> None:
    for relpath, size in sorted(_wanted(checkpoint, selector).items()):
        target = inside(dst, relpath)
        if relpath.endswith("/"):
            target.mkdir(parents=True, exist_ok=True)
        else:
            _fetch(gateway, checkpoint.uuid, relpath, size, target)


def _fetch(gateway: Gateway, uuid: str, relpath: str, size: int, target: pathlib.Path) -> None:
    """One file, resumed from what is here, retried while the gateway is
    unavailable for less than RESUME_FOR_S at a time."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if size == 0:
        target.touch()
        return
    deadline = time.monotonic() + RESUME_FOR_S
    while True:
        have = _resume_point(target, size)
        if have == size:
            return
        try:
            size = _stream_into(gateway, uuid, relpath, have, target)
        except MasterUnavailableError:
            if _resume_point(target, size) > have:
                deadline = time.monotonic() + RESUME_FOR_S
            elif time.monotonic() > deadline:
                raise
            time.sleep(RESUME_INTERVAL_S)
            continue
        if _resume_point(target, size) != size:
            raise CliError(f"the master's stream of {relpath} of checkpoint {uuid} ended before the file did")
        return


def _resume_point(target: pathlib.Path, size: int) -> int:
    """The bytes of the file already here, or 0 to start over when there are
    more than the file has (another file's leftovers)."""
    try:
        have = target.stat().st_size
    except FileNotFoundError:
        return 0
    return have if have <= size else 0


def _stream_into(gateway: Gateway, uuid: str, relpath: str, offset: int, target: pathlib.Path) -> int:
    """Appends the file's bytes from `offset` on to `target`; returns the
    file's whole size as the gateway tells it."""
    from determined.proto import api_pb2

    request = api_pb2.DownloadCheckpointFileRequest(uuid=uuid, path=relpath, offset=offset)
    size = offset
    with open(target, "r+b" if target.exists() else "wb") as out:
        out.truncate(offset)
        out.seek(offset)
        for response in gateway.stream(gateway.stub.DownloadCheckpointFile, request):
            if response.offset != out.tell():
                raise CliError(
                    f"the master sent {relpath} of checkpoint {uuid} from byte {response.offset}, "
                    f"expected byte {out.tell()}"
                )
            out.write(response.data)
            size = response.size
    return size
