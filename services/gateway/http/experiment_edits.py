"""Determined's REST routes for editing an experiment, over the same feature
functions as gRPC (features/experiments/edits.py): POST .../archive and
.../unarchive, PATCH /api/v1/experiments/{id} (name, description, notes,
labels: Determined's v1PatchExperiment; a field that is absent or null stays
as it is), PUT and DELETE .../labels/{label}; and GET .../model_def, the
context it was created with (Determined's `b64Tgz`)."""

import base64
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from determined.proto import api_pb2, events_pb2
from services.gateway.api import Api
from services.gateway.errors import InvalidArgumentError
from services.gateway.http import shapes
from services.gateway.http.params import json_body

Handler = Callable[[Request], Awaitable[Response]]
# A PATCH body: a name, a description, notes and labels within their limits, with room.
MAX_PATCH_BODY_BYTES = 1024 * 1024


def experiment_edit_routes(api: Api, user: Callable[[Handler], Handler]) -> list[Route]:
    """The routes, each run as the calling user (`user`)."""
    edits = api.experiment_edits
    experiment = "/api/v1/experiments/{experiment_id:int}"

    async def archive(request: Request) -> Response:
        answer = await edits.archive_experiment(api_pb2.ArchiveExperimentRequest(experiment_id=_id(request)))
        return JSONResponse({"unchangedReason": answer.unchanged_reason})

    async def unarchive(request: Request) -> Response:
        answer = await edits.unarchive_experiment(
            api_pb2.UnarchiveExperimentRequest(experiment_id=_id(request))
        )
        return JSONResponse({"unchangedReason": answer.unchanged_reason})

    async def patch(request: Request) -> Response:
        body = await json_body(request, MAX_PATCH_BODY_BYTES)
        answer = await edits.patch_experiment(patch_request(_id(request), body))
        return JSONResponse({"experiment": shapes.experiment(answer.experiment)})

    async def put_label(request: Request) -> Response:
        answer = await edits.put_experiment_label(
            api_pb2.PutExperimentLabelRequest(experiment_id=_id(request), label=request.path_params["label"])
        )
        return JSONResponse({"labels": list(answer.labels)})

    async def delete_label(request: Request) -> Response:
        answer = await edits.delete_experiment_label(
            api_pb2.DeleteExperimentLabelRequest(
                experiment_id=_id(request), label=request.path_params["label"]
            )
        )
        return JSONResponse({"labels": list(answer.labels)})

    async def model_def(request: Request) -> Response:
        answer = await api.experiments.get_model_def(api_pb2.GetModelDefRequest(experiment_id=_id(request)))
        return JSONResponse({"b64Tgz": base64.b64encode(answer.context_tgz).decode()})

    return [
        Route(experiment + "/model_def", user(model_def)),
        Route(experiment + "/archive", user(archive), methods=["POST"]),
        Route(experiment + "/unarchive", user(unarchive), methods=["POST"]),
        Route(experiment, user(patch), methods=["PATCH"]),
        Route(experiment + "/labels/{label:str}", user(put_label), methods=["PUT"]),
        Route(experiment + "/labels/{label:str}", user(delete_label), methods=["DELETE"]),
    ]


def patch_request(experiment_id: int, body: dict[str, Any]) -> api_pb2.PatchExperimentRequest:
    """PatchExperimentRequest from Determined's v1PatchExperiment body (its
    `resources` and `checkpointStorage` are refused: det experiment set
    priority|weight|max-slots|gc-policy change those)."""
    for field in ("resources", "checkpointStorage"):
        if body.get(field) is not None:
            raise InvalidArgumentError(
                f"{field} cannot be patched here: use det experiment set priority|weight|max-slots|gc-policy"
            )
    request = api_pb2.PatchExperimentRequest(experiment_id=experiment_id)
    for field in ("name", "description", "notes"):
        value = body.get(field)
        if value is not None:
            if not isinstance(value, str):
                raise InvalidArgumentError(f"{field} must be a string, not {value!r:.80}")
            setattr(request, field, value)
    labels = body.get("labels")
    if labels is not None:
        if not isinstance(labels, list) or not all(isinstance(label, str) for label in labels):
            raise InvalidArgumentError("labels must be a list of strings")
        request.labels.CopyFrom(events_pb2.ExperimentLabels(labels=labels))
    return request


def _id(request: Request) -> int:
    return int(request.path_params["experiment_id"])
