"""A trial's TensorBoard folder copied to its checkpoint storage, a file at a time when it is
new or changed since it was last copied.

Uploads run on a thread of their own, so that a report call does not wait for the storage: an
upload asked for while another is queued with the same selector and mangler is the queued one
(it will see the newest files). A failed upload is logged and its files stay "changed", so the
next upload tries them again. `close()` waits for what is queued."""

import logging
import os
import pathlib
import shutil
import stat
import tempfile
import threading
from collections.abc import Callable, Iterator

from determined.common.storage import StorageManager, check_relpath

logger = logging.getLogger("determined.tensorboard")

# A file's (size, mtime_ns) when it was last uploaded.
Stamp = tuple[int, int]
# Which files to upload (given each file's local path) ...
Selector = Callable[[pathlib.Path], bool]
# ... and under which name (given its path relative to the folder, and the worker's rank).
Mangler = Callable[[pathlib.Path, int], pathlib.Path]
# Uploads queued at most; asking for more waits (a slow storage slows the caller down rather
# than piling up requests).
MAX_QUEUED = 4
# How long `close()` waits for the queued uploads (a storage that stopped answering).
CLOSE_TIMEOUT_S = 300.0


def every_file(path: pathlib.Path) -> bool:
    return True


def same_name(path: pathlib.Path, rank: int) -> pathlib.Path:
    return path


class Uploader:
    """Copies `folder`'s files to checkpoint `storage_id` of `storage` (a trial's folder of
    `trial_storage`)."""

    def __init__(self, folder: pathlib.Path, storage: StorageManager, storage_id: str, rank: int = 0) -> None:
        self.folder = folder
        self._storage = storage
        self._storage_id = storage_id
        self._rank = rank
        self._uploaded: dict[pathlib.Path, Stamp] = {}
        self._queue: list[tuple[Selector, Mangler]] = []
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False

    def request(self, selector: Selector = every_file, mangler: Mangler = same_name) -> None:
        """Upload the selected files that changed, soon (on the uploading thread)."""
        with self._changed:
            if self._closed:
                raise RuntimeError("TensorBoard files cannot be uploaded after the core context is closed")
            self._changed.wait_for(lambda: len(self._queue) < MAX_QUEUED)
            if (selector, mangler) not in self._queue:
                self._queue.append((selector, mangler))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="tensorboard-upload", daemon=True)
                self._thread.start()
            self._changed.notify_all()

    def close(self) -> None:
        """Wait for the queued uploads (at most CLOSE_TIMEOUT_S); asking for more is an error."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        if self._thread is not None:
            self._thread.join(CLOSE_TIMEOUT_S)
            if self._thread.is_alive():
                logger.error(
                    "TensorBoard files were still uploading to %r after %.0f s: the rest is not uploaded",
                    self._storage,
                    CLOSE_TIMEOUT_S,
                )

    def upload(self, selector: Selector = every_file, mangler: Mangler = same_name) -> int:
        """Upload the selected files that changed, now; how many. Raises what the storage raises
        (those files are tried again next time)."""
        changed = [(path, stamp) for path, stamp in _files(self.folder) if self._uploaded.get(path) != stamp]
        chosen = [(path, stamp) for path, stamp in changed if selector(path)]
        if not chosen:
            return 0
        names = {path: _name(mangler, path.relative_to(self.folder), self._rank) for path, _ in chosen}
        renamed = {
            path: name for path, name in names.items() if name != path.relative_to(self.folder).as_posix()
        }
        plain = [name for path, name in names.items() if path not in renamed]
        if plain:
            self._storage.upload(self.folder, self._storage_id, paths=plain)
        if renamed:
            self._upload_renamed(renamed)
        self._uploaded.update(chosen)
        return len(chosen)

    def _upload_renamed(self, names: dict[pathlib.Path, str]) -> None:
        """Files whose name the mangler changed, through copies under their new names."""
        with tempfile.TemporaryDirectory(prefix="det-tensorboard-") as staging:
            for path, name in names.items():
                copy = pathlib.Path(staging, name)
                copy.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, copy)
            self._storage.upload(pathlib.Path(staging), self._storage_id, paths=list(names.values()))

    def _run(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: bool(self._queue) or self._closed)
                if not self._queue:
                    return
                # Out of the queue before it starts: a request from now on is one more upload.
                selector, mangler = self._queue.pop(0)
                self._changed.notify_all()
            try:
                self.upload(selector, mangler)
            except Exception as error:
                # Not the trial's end: the files are tried again at the next upload.
                logger.warning("could not upload TensorBoard files to %r: %s", self._storage, error)


def _name(mangler: Mangler, relpath: pathlib.Path, rank: int) -> str:
    """The file's name in the storage; ValueError for a mangler's name outside the folder."""
    return check_relpath(pathlib.PurePath(mangler(relpath, rank)).as_posix())


def _files(folder: pathlib.Path) -> Iterator[tuple[pathlib.Path, Stamp]]:
    """The regular files under `folder` (links are left out) and their stamps."""
    for dirpath, _, filenames in os.walk(folder):
        for name in filenames:
            path = pathlib.Path(dirpath, name)
            try:
                info = path.lstat()
            except FileNotFoundError:  # deleted since it was listed
                continue
            if stat.S_ISREG(info.st_mode):
                yield path, (info.st_size, info.st_mtime_ns)
