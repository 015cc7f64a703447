"""The model registry in the SDK: models and their versions (registered
checkpoints, which garbage collection never deletes)."""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from determined.experimental._checkpoint import Checkpoint, OrderBy
from determined.experimental._unsupported import NO_WORKSPACES, refuse, unsupported_method

if TYPE_CHECKING:
    from determined.cli._client import Gateway
    from determined.experimental._trial import TrialMetrics
    from determined.proto import api_pb2


class ModelSortBy(enum.Enum):
    """What list_models sorts by (Determined's members; sorted here, in the SDK)."""

    NAME = "name"
    DESCRIPTION = "description"
    CREATION_TIME = "creation_time"
    LAST_UPDATED_TIME = "last_updated_time"
    NUM_VERSIONS = "num_versions"
    WORKSPACE = "workspace"


# Determined's other name for it.
ModelOrderBy = OrderBy

# Models here are never edited: last updated is when the last version was registered.
_MODEL_KEYS: dict[ModelSortBy, Callable[[api_pb2.Model], Any]] = {
    ModelSortBy.NAME: lambda m: m.name,
    ModelSortBy.DESCRIPTION: lambda m: m.description,
    ModelSortBy.CREATION_TIME: lambda m: m.created_at_ns,
    ModelSortBy.LAST_UPDATED_TIME: lambda m: max(
        [m.created_at_ns, *(v.registered_at_ns for v in m.versions)]
    ),
    ModelSortBy.NUM_VERSIONS: lambda m: len(m.versions),
}


def sorted_models(models: list[Model], sort_by: ModelSortBy, order_by: OrderBy | str) -> list[Model]:
    sort_by = ModelSortBy(sort_by)
    if sort_by not in _MODEL_KEYS:
        refuse(f"ModelSortBy.{sort_by.name}", NO_WORKSPACES)
    order = OrderBy(order_by.lower()) if isinstance(order_by, str) else order_by
    key = _MODEL_KEYS[sort_by]
    return sorted(models, key=lambda m: key(m._message), reverse=order is OrderBy.DESC)


_NO_MODEL_EDITS = "models here are not edited once created (register versions instead)"


class ModelVersion:
    def __init__(self, gateway: Gateway, message: api_pb2.ModelVersion) -> None:
        self._message = message
        self.checkpoint = Checkpoint(gateway, message.checkpoint)

    def __repr__(self) -> str:
        return f"ModelVersion(model_name={self.model_name!r}, model_version={self.model_version})"

    @property
    def model_name(self) -> str:
        return self._message.model_name

    @property
    def model_version(self) -> int:
        """From 1, in registration order."""
        return self._message.version

    @property
    def name(self) -> str:
        return self._message.name

    @property
    def comment(self) -> str:
        return self._message.comment

    @property
    def registration_time(self) -> datetime:
        return datetime.fromtimestamp(self._message.registered_at_ns / 1e9, UTC)

    def get_metrics(self, group: str | None = None) -> Iterator[TrialMetrics]:
        """The metrics of trials that used its checkpoint (see Checkpoint.get_metrics)."""
        return self.checkpoint.get_metrics(group)

    iter_metrics = get_metrics

    set_name = unsupported_method("ModelVersion.set_name", "a version's name is given when it is registered")
    set_notes = unsupported_method(
        "ModelVersion.set_notes", "a version's comment is given when it is registered"
    )
    delete = unsupported_method("ModelVersion.delete", "a registered version is kept for good")


class Model:
    """One model, as the master knew it when it was fetched (`reload()` fetches it again)."""

    def __init__(self, gateway: Gateway, message: api_pb2.Model) -> None:
        self._gateway = gateway
        self._message = message

    def __repr__(self) -> str:
        return f"Model(name={self.name!r})"

    @property
    def model_id(self) -> int:
        return self._message.model_id

    @property
    def name(self) -> str:
        return self._message.name

    @property
    def description(self) -> str:
        return self._message.description

    @property
    def metadata(self) -> dict[str, Any]:
        return dict(json.loads(self._message.metadata_json)) if self._message.metadata_json else {}

    @property
    def labels(self) -> list[str]:
        return list(self._message.labels)

    @property
    def creation_time(self) -> datetime:
        return datetime.fromtimestamp(self._message.created_at_ns / 1e9, UTC)

    def reload(self) -> None:
        self._message = get_model_message(self._gateway, self.name)

    def register_version(self, checkpoint_uuid: str, name: str = "", comment: str = "") -> ModelVersion:
        """Registers the checkpoint as the model's next version: from then on,
        garbage collection keeps it."""
        from determined.proto import api_pb2

        request = api_pb2.RegisterModelVersionRequest(
            model_name=self.name, checkpoint_uuid=checkpoint_uuid, name=name, comment=comment
        )
        response: api_pb2.RegisterModelVersionResponse = self._gateway.call(
            self._gateway.stub.RegisterModelVersion, request
        )
        return ModelVersion(self._gateway, response.version)

    def get_versions(self, order_by: OrderBy = OrderBy.DESC) -> list[ModelVersion]:
        """Every version, newest first (or oldest first with OrderBy.ASC)."""
        self.reload()
        versions = [ModelVersion(self._gateway, v) for v in self._message.versions]
        versions.sort(key=lambda v: v.model_version, reverse=order_by is OrderBy.DESC)
        return versions

    # Determined's other name.
    list_versions = get_versions

    add_metadata = unsupported_method("Model.add_metadata", _NO_MODEL_EDITS)
    remove_metadata = unsupported_method("Model.remove_metadata", _NO_MODEL_EDITS)
    set_description = unsupported_method("Model.set_description", _NO_MODEL_EDITS)
    set_labels = unsupported_method("Model.set_labels", _NO_MODEL_EDITS)
    archive = unsupported_method("Model.archive", _NO_MODEL_EDITS)
    unarchive = unsupported_method("Model.unarchive", _NO_MODEL_EDITS)
    delete = unsupported_method("Model.delete", "a model's versions are kept for good")
    move_to_workspace = unsupported_method("Model.move_to_workspace", NO_WORKSPACES)

    def get_version(self, version: int = -1) -> ModelVersion | None:
        """Version `version` (from 1), or the latest with -1; None when there is none."""
        versions = self.get_versions(OrderBy.ASC)
        if version == -1:
            return versions[-1] if versions else None
        return next((v for v in versions if v.model_version == version), None)


def get_model_message(gateway: Gateway, name: str) -> api_pb2.Model:
    from determined.proto import api_pb2

    response: api_pb2.GetModelResponse = gateway.call(
        gateway.stub.GetModel, api_pb2.GetModelRequest(name=name)
    )
    return response.model
