"""Checkpoints in the SDK, and the sorting the checkpoint listings share."""

from __future__ import annotations

import enum
import json
import logging
import pathlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from determined.cli._download import DownloadMode, download
from determined.common.states import CheckpointState
from determined.experimental._unsupported import NO_PACHYDERM, unsupported_method

if TYPE_CHECKING:
    from determined.cli._client import Gateway
    from determined.experimental._trial import TrialMetrics
    from determined.proto import api_pb2

logger = logging.getLogger("determined.experimental")


class CheckpointSortBy(enum.Enum):
    """What checkpoint listings sort by besides a validation metric's name (UUID, TRIAL_ID
    and STATE are sorted here, in the SDK; the others by the master)."""

    SEARCHER_METRIC = "searcher_metric"
    BATCH_NUMBER = "steps_completed"
    END_TIME = "report_time"
    UUID = "uuid"
    TRIAL_ID = "trial_id"
    STATE = "state"


# The sorts the master does not know: the listing comes by report time, sorted here.
_SORTED_HERE: dict[CheckpointSortBy, Callable[[api_pb2.Checkpoint], Any]] = {
    CheckpointSortBy.UUID: lambda c: c.uuid,
    CheckpointSortBy.TRIAL_ID: lambda c: c.trial_id,
    CheckpointSortBy.STATE: lambda c: c.state,
}


class OrderBy(enum.Enum):
    ASC = "asc"
    DESC = "desc"
    # Determined's other names for them: aliases of the same members.
    ASCENDING = "asc"  # noqa: PIE796
    DESCENDING = "desc"  # noqa: PIE796


def list_checkpoints(
    gateway: Gateway,
    method: Callable[..., api_pb2.GetCheckpointsResponse],
    request: Callable[..., Any],
    sort_by: str | CheckpointSortBy | None,
    order_by: OrderBy | str | None,
    max_results: int | None,
) -> list[Checkpoint]:
    """An experiment's or a trial's checkpoints (`request(**fields)` makes the listing's
    request), sorted as asked, at most max_results of them."""
    sorted_here = _SORTED_HERE.get(sort_by) if isinstance(sort_by, CheckpointSortBy) else None
    fields = listing_request(sort_by, order_by, max_results)
    if sorted_here is not None:
        fields["max_results"] = 0
    response = gateway.call(method, request(**fields))
    found = list(response.checkpoints)
    if sorted_here is not None:
        found.sort(key=sorted_here, reverse=fields["order_by"] == OrderBy.DESC.value)
        found = found[: max_results or None]
    return [Checkpoint(gateway, c) for c in found]


def listing_request(
    sort_by: str | CheckpointSortBy | None, order_by: OrderBy | str | None, max_results: int | None
) -> dict[str, Any]:
    """The sort fields of GetExperimentCheckpoints / GetTrialCheckpoints. Given
    neither sort_by nor order_by, checkpoints come best first by the searcher
    metric (as Determined lists them), so `list_checkpoints()[0]` is the best.
    A string sort_by is a validation metric's name (or "searcher_metric",
    "steps_completed"); a string order_by is "asc" or "desc"."""
    if (sort_by is None) != (order_by is None):
        raise ValueError("sort_by and order_by go together: give both or neither")
    if isinstance(order_by, str):
        order_by = OrderBy(order_by.lower())
    if max_results is not None and max_results < 1:
        raise ValueError(f"max_results must be 1 or more, not {max_results}")
    fields: dict[str, Any] = {"max_results": max_results or 0}
    if sort_by is None or order_by is None:
        return {**fields, "sort_by": CheckpointSortBy.SEARCHER_METRIC.value}
    if sort_by is CheckpointSortBy.END_TIME or sort_by in _SORTED_HERE:
        return {**fields, "order_by": order_by.value}  # "" sorts by report time
    name = sort_by.value if isinstance(sort_by, CheckpointSortBy) else sort_by
    return {**fields, "sort_by": name, "order_by": order_by.value}


@dataclass(frozen=True)
class CheckpointTraining:
    """Where a checkpoint comes from and how its trial validated at its step."""

    experiment_id: int
    trial_id: int
    steps_completed: int
    # The trial's validation metrics at the checkpoint's steps_completed ({} when none).
    validation_metrics: dict[str, Any]
    searcher_metric: float | None


class Checkpoint:
    """One checkpoint, as the master knew it when it was fetched (`reload()`
    fetches it again)."""

    def __init__(self, gateway: Gateway, message: api_pb2.Checkpoint) -> None:
        self._gateway = gateway
        self._message = message

    def __repr__(self) -> str:
        return f"Checkpoint(uuid={self.uuid!r}, state={self.state.value})"

    @property
    def uuid(self) -> str:
        return self._message.uuid

    @property
    def state(self) -> CheckpointState:
        return CheckpointState(self._message.state)

    @property
    def metadata(self) -> dict[str, Any]:
        """The metadata stored with it (its metadata.json), steps_completed included."""
        return _json_object(self._message.metadata_json)

    @property
    def resources(self) -> dict[str, int]:
        """Its files as recorded, path -> bytes (directories as `dir/`): what is left
        once PARTIALLY_DELETED."""
        return dict(self._message.resources)

    @property
    def report_time(self) -> datetime:
        return datetime.fromtimestamp(self._message.reported_at_ns / 1e9, UTC)

    @property
    def training(self) -> CheckpointTraining:
        m = self._message
        return CheckpointTraining(
            experiment_id=m.experiment_id,
            trial_id=m.trial_id,
            steps_completed=m.steps_completed,
            validation_metrics=_json_object(m.validation_metrics_json),
            searcher_metric=m.searcher_metric if m.HasField("searcher_metric") else None,
        )

    @property
    def model_versions(self) -> list[str]:
        """The model versions it is registered as ("<model>:<version>"): GC never deletes it."""
        return list(self._message.model_versions)

    @property
    def delete_error(self) -> str:
        """Why files are left after a deletion ("" unless the storage refused some)."""
        return self._message.delete_error

    def reload(self) -> None:
        from determined.cli.checkpoint import get_checkpoint

        self._message = get_checkpoint(self._gateway, self.uuid)

    def download(
        self,
        path: str | pathlib.Path | None = None,
        mode: DownloadMode | str = DownloadMode.AUTO,
        selector: Callable[[str], bool] | None = None,
    ) -> str:
        """Downloads its files into `path` (default `checkpoints/<uuid>`) and returns
        that path. `mode`: DIRECT from the storage, MASTER streamed by the master
        (resuming what an earlier download left), AUTO direct then through the
        master when the storage cannot be read from here. `selector(relpath)`
        picks the files to download. A string mode is "auto", "direct" or "master"."""
        target = pathlib.Path(path) if path is not None else pathlib.Path("checkpoints", self.uuid)
        return str(
            download(
                self._gateway,
                self._message,
                target,
                DownloadMode(mode),
                selector=selector,
                say=logger.warning,
            )
        )

    def delete(self) -> None:
        """Deletes every file of it from the storage (asynchronously: the state
        is DELETING, then DELETED). Refused for a registered model version."""
        self._delete([])

    def remove_files(self, globs: list[str]) -> None:
        """Deletes the files matching `globs` (e.g. "optimizer/**"); the checkpoint
        becomes PARTIALLY_DELETED."""
        if not globs or any(not g.strip() or ".." in g.split("/") for g in globs):
            raise ValueError(f"globs must be non-empty paths inside the checkpoint, without ..: {globs!r}")
        self._delete(globs)

    def add_metadata(self, metadata: Mapping[str, Any]) -> None:
        """Adds these keys to its metadata (a key there already takes the new value)."""
        self.reload()
        self._set_metadata({**self.metadata, **dict(metadata)})

    def remove_metadata(self, keys: Iterable[str]) -> None:
        """Removes these keys from its metadata (a key it lacks is ignored)."""
        self.reload()
        gone = set(keys)
        self._set_metadata({k: v for k, v in self.metadata.items() if k not in gone})

    def _set_metadata(self, metadata: dict[str, Any]) -> None:
        from determined.proto import api_pb2

        request = api_pb2.PostCheckpointMetadataRequest(uuid=self.uuid, metadata_json=json.dumps(metadata))
        response: api_pb2.PostCheckpointMetadataResponse = self._gateway.call(
            self._gateway.stub.PostCheckpointMetadata, request
        )
        self._message = response.checkpoint

    def write_metadata_file(self, path: str | pathlib.Path) -> None:
        """Writes its metadata as JSON to `path` (as metadata.json in a download)."""
        pathlib.Path(path).write_text(json.dumps(self.metadata, indent=2, sort_keys=True), encoding="utf-8")

    def get_metrics(self, group: str | None = None) -> Iterator[TrialMetrics]:
        """The metrics reported by trials that used this checkpoint
        (`core_context.experimental.report_task_using_checkpoint`), in `group` (None or ""
        for every group), trial by trial, each oldest first."""
        from determined.experimental._trial import iter_trials_metrics
        from determined.proto import api_pb2

        response: api_pb2.GetCheckpointUsersResponse = self._gateway.call(
            self._gateway.stub.GetCheckpointUsers, api_pb2.GetCheckpointUsersRequest(uuid=self.uuid)
        )
        yield from iter_trials_metrics(self._gateway, response.trial_ids, group or "")

    get_pachyderm_commit = unsupported_method("Checkpoint.get_pachyderm_commit", NO_PACHYDERM)

    def _delete(self, globs: list[str]) -> None:
        from determined.proto import api_pb2

        self._gateway.call(
            self._gateway.stub.DeleteCheckpoints,
            api_pb2.DeleteCheckpointsRequest(uuids=[self.uuid], globs=globs),
        )


def _json_object(text: str) -> dict[str, Any]:
    return dict(json.loads(text)) if text else {}
