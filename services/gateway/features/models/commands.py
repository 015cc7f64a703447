"""The model registry's commands: pure checks of what a user asks and the
Appends that record it (subject model/<name>). Message ids: `model-<name>`
(a model is created once: the append expects an empty subject) and
`model-version-<name>-<version>` (versions from 1 per model, appended against
the model's last event, so two registrations at once cannot take one number).

A model's name is a NATS subject token: letters, digits, '-' and '_'.
"""

import json
import re

from determined.common import states
from determined.proto import api_pb2, events_pb2
from services.common.envelope import Append, aggregate
from services.gateway.errors import FailedPreconditionError, InvalidArgumentError

MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}")


def checked_name(name: str) -> str:
    if not MODEL_NAME.fullmatch(name):
        raise InvalidArgumentError(
            f"a model's name is 1 to 128 letters, digits, '-' or '_', starting with a letter or digit; not {name[:140]!r}"
        )
    return name


def model_created(request: api_pb2.CreateModelRequest, *, model_id: int, owner: str) -> Append:
    """`det model create NAME`: appended against an empty subject (a model of
    that name exists already: the append conflicts)."""
    name = checked_name(request.name)
    if request.metadata_json:
        try:
            metadata = json.loads(request.metadata_json)
        except ValueError as error:
            raise InvalidArgumentError(f"metadata_json is not JSON: {error}") from error
        if not isinstance(metadata, dict):
            raise InvalidArgumentError("metadata_json must be a JSON object")
    labels = list(dict.fromkeys(label.strip() for label in request.labels))
    if not all(labels):
        raise InvalidArgumentError("a label may not be empty")
    payload = events_pb2.ModelCreated(
        model_id=model_id,
        name=name,
        description=request.description,
        metadata_json=request.metadata_json,
        labels=labels,
        owner=owner,
    )
    return Append(aggregate("model", name), payload, f"model-{name}", expected_version=0)


def model_version_registered(
    request: api_pb2.RegisterModelVersionRequest,
    *,
    model_id: int,
    version: int,
    checkpoint: api_pb2.Checkpoint,
    experiment_state: str,
    owner: str,
    model_version: int,
) -> Append:
    """The checkpoint registered as the model's `version` (its versions so far
    + 1): from then on it is never garbage-collected. Refused for a checkpoint
    whose files are going or gone, or whose experiment is being deleted.
    `model_version`: the model aggregate's last event, which the append expects."""
    if checkpoint.state != "COMPLETED":
        raise FailedPreconditionError(
            f"checkpoint {checkpoint.uuid} is {checkpoint.state}: only a COMPLETED checkpoint can be registered"
        )
    if experiment_state in states.EXPERIMENT_DELETION_STATES:
        raise FailedPreconditionError(
            f"checkpoint {checkpoint.uuid} belongs to experiment {checkpoint.experiment_id},"
            f" which is {experiment_state}"
        )
    payload = events_pb2.ModelVersionRegistered(
        model_name=request.model_name,
        model_id=model_id,
        version=version,
        checkpoint_uuid=checkpoint.uuid,
        experiment_id=checkpoint.experiment_id,
        trial_id=checkpoint.trial_id,
        name=request.name,
        comment=request.comment,
        owner=owner,
    )
    msg_id = f"model-version-{request.model_name}-{version}"
    return Append(aggregate("model", request.model_name), payload, msg_id, expected_version=model_version)
