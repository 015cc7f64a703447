"""Routes that Determined 0.38.1's SDK and `det master logs` call, over the same feature
functions as gRPC:

- GET /api/v1/trials/metrics/trial_metrics?trialIds=..&group=.. (the SDK's
  `Trial.iter_metrics`, `stream_metrics`, `client.stream_trials_metrics`): GetTrialMetrics
  of each trial, streamed as NDJSON `{"result": {"metrics": [v1MetricsReport...]}}`;
- POST /api/v1/checkpoints/{uuid}/metadata, body `{"checkpoint": {"uuid", "metadata"}}`
  (`Checkpoint.add_metadata` / `remove_metadata`): PostCheckpointMetadata;
- GET /api/v1/master/logs?follow=&offset=&limit= (`det master logs [-f] [--tail K]`):
  MasterLogs (an admin's only), streamed as NDJSON `{"result": {"logEntry": v1LogEntry}}`;
- GET /api/v1/checkpoints/{uuid}/metrics?metricGroup= (`Checkpoint.get_metrics`): the
  metrics of the trials that reported using the checkpoint (GetCheckpointUsers).
"""

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from determined.proto import api_pb2
from services.gateway.api import Api
from services.gateway.auth import Principal, acting_as, current_principal
from services.gateway.errors import InvalidArgumentError, as_gateway_error
from services.gateway.http import shapes
from services.gateway.http.app import error_body
from services.gateway.http.params import flag, json_body, listed, number

Handler = Callable[[Request], Awaitable[Response]]
JSON = dict[str, Any]
# The most trials one metrics stream reads (Determined's client asks for a handful).
MAX_METRICS_TRIALS = 1000
# A metadata body: PostCheckpointMetadata's 1 MiB of metadata, with room for the rest.
MAX_METADATA_BODY_BYTES = (1 << 20) + 4096
# MasterLogsRequest.tail's bound (an int32).
MAX_INT32 = (1 << 31) - 1


def sdk_routes(api: Api, user: Callable[[Handler], Handler]) -> list[Route]:
    """The routes, each run as the calling user (`user`)."""

    async def trials_metrics(request: Request) -> Response:
        trial_ids = asked_trial_ids(request)
        group = request.query_params.get("group", "")
        return _ndjson(_metrics_results(api, trial_ids, group))

    async def checkpoint_metadata(request: Request) -> Response:
        uuid = request.path_params["uuid"]
        body = await json_body(request, MAX_METADATA_BODY_BYTES)
        checkpoint = body.get("checkpoint")
        metadata = checkpoint.get("metadata") if isinstance(checkpoint, dict) else None
        if not isinstance(metadata, dict):
            raise InvalidArgumentError("checkpoint.metadata must be a JSON object")
        answer = await api.checkpoint_edits.post_checkpoint_metadata(
            api_pb2.PostCheckpointMetadataRequest(uuid=uuid, metadata_json=json.dumps(metadata))
        )
        return JSONResponse({"checkpoint": shapes.checkpoint(answer.checkpoint)})

    async def checkpoint_metrics(request: Request) -> Response:
        users = await api.checkpoint_edits.get_checkpoint_users(
            api_pb2.GetCheckpointUsersRequest(uuid=request.path_params["uuid"])
        )
        group = request.query_params.get("metricGroup", "")
        results = _metrics_results(api, list(users.trial_ids), group)
        return JSONResponse({"metrics": [report async for result in results for report in result["metrics"]]})

    async def master_logs(request: Request) -> Response:
        offset = number(request, "offset", 0, least=-MAX_INT32, most=MAX_INT32)
        limit = number(request, "limit", 0, least=0)
        logs = api.logs.master_logs(
            api_pb2.MasterLogsRequest(follow=flag(request, "follow"), tail=max(-offset, 0))
        )
        return _ndjson(log_entries(logs, skip=max(offset, 0), limit=limit))

    return [
        Route("/api/v1/trials/metrics/trial_metrics", user(trials_metrics)),
        Route("/api/v1/checkpoints/{uuid:str}/metadata", user(checkpoint_metadata), methods=["POST"]),
        Route("/api/v1/checkpoints/{uuid:str}/metrics", user(checkpoint_metrics)),
        Route("/api/v1/master/logs", user(master_logs)),
    ]


def asked_trial_ids(request: Request) -> list[int]:
    named = listed(request, "trialIds")
    if len(named) > MAX_METRICS_TRIALS:
        raise InvalidArgumentError(f"at most {MAX_METRICS_TRIALS} trialIds")
    try:
        return [int(trial_id) for trial_id in named]
    except ValueError:
        raise InvalidArgumentError("trialIds must be trial ids (numbers)") from None


async def _metrics_results(api: Api, trial_ids: list[int], group: str) -> AsyncIterator[JSON]:
    """Each trial's points in `group`, a page of them a result."""
    for trial_id in trial_ids:
        pages = api.trials.get_trial_metrics(api_pb2.GetTrialMetricsRequest(trial_id=trial_id, group=group))
        async for page in pages:
            yield {"metrics": [metrics_report(trial_id, point, group) for point in page.points]}


def metrics_report(trial_id: int, point: api_pb2.MetricPoint, asked: str) -> JSON:
    """A reported point as Determined's v1MetricsReport (its SDK reads them under
    validation_metrics when it `asked` for the validation group, else under avg_metrics)."""
    key = "validation_metrics" if asked == "validation" else "avg_metrics"
    return {
        "id": f"{trial_id}/{point.group}/{point.steps_completed}",
        "trialId": trial_id,
        "trialRunId": 0,  # restarts are not told apart in reported metrics here
        "group": point.group,
        "totalBatches": point.steps_completed,
        "endTime": shapes.time(point.reported_at_ns),
        "metrics": {key: json.loads(point.metrics_json or "{}")},
        "archived": False,
    }


async def log_entries(
    responses: AsyncIterator[api_pb2.MasterLogsResponse], *, skip: int, limit: int
) -> AsyncIterator[JSON]:
    """The master's lines as Determined's v1MasterLogsResponse, after the first
    `skip`, at most `limit` of them (0: no limit)."""
    seen = 0
    async for response in responses:
        for entry in response.entries:
            seen += 1
            if seen > skip:
                yield {"logEntry": log_entry(entry)}
            if limit and seen - skip >= limit:
                return


def log_entry(entry: api_pb2.MasterLogEntry) -> JSON:
    """A line of the master's log as Determined's v1LogEntry."""
    return {
        "id": entry.id,
        "timestamp": shapes.log_time(entry.timestamp_ns),
        "level": f"LOG_LEVEL_{entry.level}" if entry.level else "LOG_LEVEL_UNSPECIFIED",
        "message": entry.message,
    }


def _ndjson(results: AsyncIterator[JSON]) -> StreamingResponse:
    return StreamingResponse(_lines(results, current_principal()), media_type="application/x-ndjson")


async def _lines(results: AsyncIterator[JSON], caller: Principal) -> AsyncIterator[bytes]:
    """One `{"result": ...}` line each, run as the caller; a refusal (also the
    first one: these features check as they begin) ends it with `{"error": {...}}`."""
    with acting_as(caller):
        try:
            async for result in results:
                yield json.dumps({"result": result}).encode() + b"\n"
        except Exception as error:
            gateway_error = as_gateway_error(error)
            if gateway_error is None:
                raise
            yield json.dumps({"error": error_body(gateway_error)}).encode() + b"\n"
