"""A TensorBoard task's local copy of the trials it shows, kept up to date while it runs.

The copy of trial T of experiment E is `<root>/experiment/E/trial/T/` (TensorBoard's run names
are these paths). Each refresh lists each experiment's folder once per storage and copies what
is new: a new file whole, a file that grew only its new bytes (TensorBoard's files are only
ever appended to). A storage that fails (unreachable, refused, no such bucket) is logged, once
per new error, and tried again at the next refresh; the other sources are copied all the same.
"""

import json
import logging
import pathlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

from determined.common import storage as storages
from determined.common.limits import MAX_EVENT_BYTES, MAX_TENSORBOARD_TRIALS
from determined.common.storage import StorageManager
from determined.tensorboard._layout import experiment_storage

logger = logging.getLogger("determined.tensorboard")

# The sources come from one event (AllocationRequested), of the trials one TensorBoard may show.
MAX_SOURCES_BYTES = MAX_EVENT_BYTES
MAX_SOURCES = MAX_TENSORBOARD_TRIALS


@dataclass(frozen=True)
class Source:
    """A trial whose TensorBoard files are shown, and its checkpoint storage section."""

    experiment_id: int
    trial_id: int
    storage: Mapping[str, Any]


def read_sources(path: pathlib.Path) -> list[Source]:
    """The sources in JSON file `path` (DET_TENSORBOARD_SOURCES_FILE): a list of
    {"experiment_id", "trial_id", "storage"}. ValueError saying what is wrong."""
    if path.stat().st_size > MAX_SOURCES_BYTES:
        raise ValueError(f"{path} is larger than {MAX_SOURCES_BYTES} bytes")
    try:
        entries = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path} is not JSON: {error}") from None
    if not isinstance(entries, list) or len(entries) > MAX_SOURCES:
        raise ValueError(f"{path} must hold a list of at most {MAX_SOURCES} sources")
    return [_source(entry, index) for index, entry in enumerate(entries)]


def _source(entry: Any, index: int) -> Source:
    if not isinstance(entry, dict):
        raise ValueError(f"source {index} must be an object, got {type(entry).__name__}")
    experiment_id, trial_id = entry.get("experiment_id"), entry.get("trial_id")
    if not (_positive_int(experiment_id) and _positive_int(trial_id)):
        raise ValueError(
            f"source {index} needs positive integers experiment_id and trial_id, got {experiment_id!r}, {trial_id!r}"
        )
    storage = entry.get("storage")
    if not isinstance(storage, dict) or not isinstance(storage.get("type"), str):
        raise ValueError(f"source {index} needs its checkpoint storage section (an object with a type)")
    return Source(experiment_id, trial_id, storage)


def _positive_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


class Fetcher:
    def __init__(
        self,
        sources: list[Source],
        root: pathlib.Path,
        build: Callable[[Mapping[str, Any]], StorageManager] = storages.build,
    ) -> None:
        self.root = root
        self._build = build
        # (storage section as JSON, experiment id) -> the trial ids shown.
        self._wanted: dict[tuple[str, int], set[int]] = {}
        for source in sources:
            key = (json.dumps(source.storage, sort_keys=True), source.experiment_id)
            self._wanted.setdefault(key, set()).add(source.trial_id)
        self._storages: dict[str, StorageManager] = {}
        self._errors: dict[str, str] = {}

    def refresh(self) -> int:
        """Copy what changed; how many files were written to."""
        written = 0
        for (section, experiment_id), trial_ids in self._wanted.items():
            where = f"experiment {experiment_id}'s TensorBoard files"
            try:
                storage = self._storage(section)
                listing = storage.list_resources(str(experiment_id))
            except Exception as error:
                self._failed(where, f"{where} cannot be listed: {error}")
                continue
            self._succeeded(where)
            for relpath, size in sorted(listing.items()):
                if _trial_id(relpath) in trial_ids:
                    written += self._copy(storage, experiment_id, relpath, size)
        return written

    def _storage(self, section: str) -> StorageManager:
        if section not in self._storages:
            self._storages[section] = experiment_storage(self._build(json.loads(section)))
        return self._storages[section]

    def _copy(self, storage: StorageManager, experiment_id: int, relpath: str, size: int) -> int:
        """Bring one listed file (or folder) up to date; 1 when it was written to."""
        where = f"experiment {experiment_id}'s {relpath}"
        try:
            target = self.root / "experiment" / str(experiment_id) / storages.check_relpath(relpath)
            if relpath.endswith("/"):
                target.mkdir(parents=True, exist_ok=True)
                return 0
            have = target.stat().st_size if target.exists() else 0
            if have == size:
                return 0
            # Grown: the new bytes only. Shorter: replaced, copied again whole.
            offset = have if have < size else 0
            chunks = storage.read(str(experiment_id), relpath, offset)  # refused here, before any write
            target.parent.mkdir(parents=True, exist_ok=True)
            with target.open("ab" if offset else "wb") as out:
                for chunk in chunks:
                    out.write(chunk)
        except Exception as error:
            self._failed(where, f"{where} cannot be copied: {error}")
            return 0
        self._succeeded(where)
        return 1

    def _failed(self, where: str, message: str) -> None:
        if self._errors.get(where) != message:
            logger.warning("%s (tried again every refresh)", message)
            self._errors[where] = message

    def _succeeded(self, where: str) -> None:
        if self._errors.pop(where, None) is not None:
            logger.info("%s: works again", where)


def _trial_id(relpath: str) -> int | None:
    """The trial of a path `trial/<id>/...` of an experiment's folder."""
    parts = relpath.split("/")
    if len(parts) < 3 or parts[0] != "trial" or not parts[1].isdecimal():
        return None
    return int(parts[1])
