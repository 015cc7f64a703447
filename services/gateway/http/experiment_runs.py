"""Determined's REST routes for cancelling and continuing an experiment, over
the same feature functions as gRPC (features/experiments/runs.py):
POST /api/v1/experiments/{id}/cancel, and POST /api/v1/experiments/continue
with Determined's v1ContinueExperimentRequest body (`id`, `overrideConfig`:
YAML text), answering `{experiment, warnings}`."""

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from determined.common.expconf import MAX_CONFIG_BYTES
from determined.proto import api_pb2
from services.gateway.api import Api
from services.gateway.errors import InvalidArgumentError
from services.gateway.http import shapes
from services.gateway.http.params import body_str, json_body

Handler = Callable[[Request], Awaitable[Response]]
# A continue's body: the override config at its limit, JSON-escaped, with room.
MAX_CONTINUE_BODY_BYTES = 2 * MAX_CONFIG_BYTES + 4096


def experiment_run_routes(api: Api, user: Callable[[Handler], Handler]) -> list[Route]:
    """The routes, each run as the calling user (`user`)."""
    runs = api.experiment_runs

    async def cancel(request: Request) -> Response:
        experiment_id = int(request.path_params["experiment_id"])
        answer = await runs.cancel_experiment(api_pb2.CancelExperimentRequest(experiment_id=experiment_id))
        return JSONResponse({"unchangedReason": answer.unchanged_reason})

    async def continue_(request: Request) -> Response:
        body = await json_body(request, MAX_CONTINUE_BODY_BYTES)
        answer = await runs.continue_experiment(continue_request(body))
        return JSONResponse({"experiment": shapes.experiment(answer.experiment), "warnings": []})

    return [
        Route("/api/v1/experiments/{experiment_id:int}/cancel", user(cancel), methods=["POST"]),
        Route("/api/v1/experiments/continue", user(continue_), methods=["POST"]),
    ]


def continue_request(body: dict[str, Any]) -> api_pb2.ContinueExperimentRequest:
    experiment_id = body.get("id")
    if type(experiment_id) is not int or not 0 < experiment_id < 2**63:
        raise InvalidArgumentError(
            f"id must be an experiment id (a whole number from 1), not {experiment_id!r:.80}"
        )
    return api_pb2.ContinueExperimentRequest(
        experiment_id=experiment_id, override_config_yaml=body_str(body, "overrideConfig")
    )
