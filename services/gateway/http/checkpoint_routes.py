"""Determined's REST routes for checkpoints and a trial's workloads, over the
same feature functions as gRPC (features/checkpoints, features/trials):

- GET /api/v1/experiments/{id}/checkpoints and /api/v1/trials/{id}/checkpoints:
  sortByAttr (SORT_BY_END_TIME, SORT_BY_BATCH_NUMBER, SORT_BY_SEARCHER_METRIC)
  or sortByMetric (a validation metric), orderBy, states (STATE_COMPLETED,
  ...), offset, limit (0: all), with Determined's pagination;
- GET /api/v1/checkpoints/{uuid}; GET /api/v1/checkpoints/{uuid}/files/{path}
  (one recorded file); GET /checkpoints/{uuid}, the whole checkpoint as a
  .tar.gz (checkpoint_archive.py);
- GET /api/v1/trials/{id}/workloads (workloads.py).

A checkpoint is shown with its experiment's config (Determined's client reads
the storage to download from there).
"""

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import PurePosixPath
from typing import Any, TypeVar
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from determined.proto import api_pb2
from services.gateway.api import Api
from services.gateway.errors import InvalidArgumentError, NotFoundError
from services.gateway.http import shapes, workloads
from services.gateway.http.checkpoint_archive import tar_gz
from services.gateway.http.params import flag, listed, number, order_by

Handler = Callable[[Request], Awaitable[Response]]
JSON = dict[str, Any]
T = TypeVar("T")
# Determined's checkpoint sortByAttr values and the listing's sort_by for each.
CHECKPOINT_SORTS = {
    "": "",
    "SORT_BY_UNSPECIFIED": "",
    "SORT_BY_END_TIME": "",
    "SORT_BY_BATCH_NUMBER": "steps_completed",
    "SORT_BY_SEARCHER_METRIC": "searcher_metric",
}
# The metric groups that are workloads (Determined's steps and validations).
WORKLOAD_GROUPS = ("training", "validation")


def checkpoint_routes(api: Api, user: Callable[[Handler], Handler]) -> list[Route]:
    """The routes, each run as the calling user (`user`)."""
    checkpoints = api.checkpoints

    async def experiment_checkpoints(request: Request) -> Response:
        answer = await checkpoints.get_experiment_checkpoints(
            api_pb2.GetExperimentCheckpointsRequest(
                experiment_id=request.path_params["experiment_id"], **_listing(request)
            )
        )
        return await _page(api, request, answer.checkpoints)

    async def trial_checkpoints(request: Request) -> Response:
        answer = await checkpoints.get_trial_checkpoints(
            api_pb2.GetTrialCheckpointsRequest(trial_id=request.path_params["trial_id"], **_listing(request))
        )
        return await _page(api, request, answer.checkpoints)

    async def checkpoint(request: Request) -> Response:
        found = await checkpoints.get_checkpoint(
            api_pb2.GetCheckpointRequest(uuid=request.path_params["uuid"])
        )
        config = await _experiment_config(api, found.checkpoint.experiment_id)
        return JSONResponse({"checkpoint": shapes.checkpoint(found.checkpoint, config)})

    async def checkpoint_file(request: Request) -> Response:
        """One of the checkpoint's recorded files, streamed from its storage as
        DownloadCheckpointFile reads it (a path not recorded is NOT_FOUND)."""
        path = request.path_params["path"]
        download = checkpoints.download_checkpoint_file(
            api_pb2.DownloadCheckpointFileRequest(uuid=request.path_params["uuid"], path=path)
        )
        first, responses = await _begun(download)  # no such checkpoint, file or storage: refused here
        name = quote(PurePosixPath(path).name or "file")
        headers = {
            "content-length": str(first.size),
            "content-disposition": f"attachment; filename*=UTF-8''{name}",
        }
        chunks = (response.data async for response in responses)
        return StreamingResponse(chunks, media_type="application/octet-stream", headers=headers)

    async def archive(request: Request) -> Response:
        """The checkpoint as a .tar.gz (what Determined's client asks with Accept: application/gzip)."""
        found = await checkpoints.checkpoint(request.path_params["uuid"])
        if found.state == "DELETED":
            raise NotFoundError(f"checkpoint {found.uuid} was deleted")
        name = quote(f"{found.uuid}.tar.gz")
        headers = {"content-disposition": f"attachment; filename*=UTF-8''{name}"}
        _, body = await _begun(
            tar_gz(found, checkpoints.download_checkpoint_file)
        )  # its first file's refusal
        return StreamingResponse(body, media_type="application/gzip", headers=headers)

    async def trial_workloads(request: Request) -> Response:
        trial_id = request.path_params["trial_id"]
        kinds = workloads.kinds_of(request.query_params.get("filter", ""))
        points = [
            point
            for group in WORKLOAD_GROUPS
            if group in kinds
            async for page in api.trials.get_trial_metrics(
                api_pb2.GetTrialMetricsRequest(trial_id=trial_id, group=group)
            )
            for point in page.points
        ]
        found: Sequence[api_pb2.Checkpoint] = []
        if "checkpoint" in kinds:
            listing = api_pb2.GetTrialCheckpointsRequest(
                trial_id=trial_id, include_deleted=not flag(request, "removeDeletedCheckpoints")
            )
            found = (await checkpoints.get_trial_checkpoints(listing)).checkpoints
        shown = workloads.workloads(
            points, found, request.query_params.get("sortKey", ""), order_by(request) == "desc"
        )
        offset, limit = _offset_and_limit(request)
        page = shown[offset : offset + limit] if limit else shown[offset:]
        return JSONResponse(
            {"workloads": page, "pagination": shapes.pagination(offset, limit, len(page), len(shown))}
        )

    experiment = "/api/v1/experiments/{experiment_id:int}"
    trial = "/api/v1/trials/{trial_id:int}"
    return [
        Route(experiment + "/checkpoints", user(experiment_checkpoints)),
        Route(trial + "/checkpoints", user(trial_checkpoints)),
        Route(trial + "/workloads", user(trial_workloads)),
        Route("/api/v1/checkpoints/{uuid:str}", user(checkpoint)),
        Route("/api/v1/checkpoints/{uuid:str}/files/{path:path}", user(checkpoint_file)),
        Route("/checkpoints/{uuid:str}", user(archive)),
    ]


async def _begun(stream: AsyncIterator[T]) -> tuple[T, AsyncIterator[T]]:
    """The stream's first item, read now (so that a refusal there is an error
    status, raised before the answer starts), and the whole stream."""
    first = await anext(stream)

    async def whole() -> AsyncIterator[T]:
        yield first
        async for item in stream:
            yield item

    return first, whole()


def _listing(request: Request) -> JSON:
    """A checkpoint listing's request fields: every checkpoint sorted (the
    page and the states are chosen from them by `_page`)."""
    by_metric = request.query_params.get("sortByMetric", "")
    by_attribute = request.query_params.get("sortByAttr", "")
    if by_attribute not in CHECKPOINT_SORTS:
        raise InvalidArgumentError(f"sortByAttr must be one of {', '.join(sorted(CHECKPOINT_SORTS)[1:])}")
    return {
        "sort_by": by_metric or CHECKPOINT_SORTS[by_attribute],
        "order_by": order_by(request),
        "include_deleted": True,
    }


async def _page(api: Api, request: Request, found: Sequence[api_pb2.Checkpoint]) -> Response:
    """The page of the checkpoints in the asked states (default: all but
    DELETED, as our own listings), with Determined's pagination."""
    states = {state.upper().removeprefix("STATE_") for state in listed(request, "states")}
    kept = (
        [c for c in found if shapes.checkpoint_state(c.state)[len("STATE_") :] in states]
        if states
        else [c for c in found if c.state != "DELETED"]
    )
    offset, limit = _offset_and_limit(request)
    page = kept[offset : offset + limit] if limit else kept[offset:]
    config = await _experiment_config(api, page[0].experiment_id) if page else None
    return JSONResponse(
        {
            "checkpoints": [shapes.checkpoint(c, config) for c in page],
            "pagination": shapes.pagination(offset, limit, len(page), len(kept)),
        }
    )


def _offset_and_limit(request: Request) -> tuple[int, int]:
    return number(request, "offset", 0, least=0), number(request, "limit", 0, least=0)


async def _experiment_config(api: Api, experiment_id: int) -> JSON | None:
    """The experiment's config (None when it is gone)."""
    try:
        answer = await api.experiments.get_experiment(
            api_pb2.GetExperimentRequest(experiment_id=experiment_id)
        )
    except NotFoundError:
        return None
    config: JSON = json.loads(answer.experiment.config_json or "{}")
    return config
