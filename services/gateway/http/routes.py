"""The HTTP edge: Determined's REST paths and parameters over the features'
functions (api.py), the same ones the gRPC servicer calls (nothing here reads
the read models or decides on its own). Each handler turns the HTTP request
into the RPC's request, calls the feature as the gRPC servicer would, and
shows the answer in Determined's shapes (shapes.py).
"""

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from google.protobuf import json_format
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from determined.proto import api_pb2
from services.common.connection import NatsUnavailableError
from services.gateway import watched
from services.gateway.api import Api
from services.gateway.auth import Principal, acting_as, current_principal
from services.gateway.downsample import lttb
from services.gateway.errors import (
    InvalidArgumentError,
    ReadModelsUnavailableError,
    as_gateway_error,
)
from services.gateway.http import live, shapes, trial_log_params
from services.gateway.http.agent_routes import agent_routes
from services.gateway.http.app import (
    Authenticate,
    authenticated,
    clear_session_cookie,
    error_body,
    set_session_cookie,
    unauthenticated,
)
from services.gateway.http.checkpoint_routes import checkpoint_routes
from services.gateway.http.experiment_edits import experiment_edit_routes
from services.gateway.http.experiment_runs import experiment_run_routes
from services.gateway.http.metrics import metrics_endpoint
from services.gateway.http.model_definition import context_archive
from services.gateway.http.params import (
    body_flag,
    body_str,
    event_filter,
    experiments_request,
    flag,
    id_list,
    json_body,
    number,
    str_list,
    time_ns,
)
from services.gateway.http.sdk_routes import sdk_routes

# A chart's points when the request names no max_points, and the most it may ask for.
CHART_POINTS = 1000
MAX_CHART_POINTS = 100_000
# The web UI's static files (packaged with the distribution), served to anyone:
# the page itself logs in and sends its token on every /api/v1 call.
UI_DIRECTORY = Path(__file__).parent / "ui"
# The web UI's page: always asked for again (a new version shows at once), and never shown in
# a frame of another page (a task's page could otherwise trick a click on the UI's buttons).
UI_PAGE_HEADERS = {
    "cache-control": "no-cache",
    "content-security-policy": "frame-ancestors 'none'",
    "x-frame-options": "DENY",
}
# A LaunchTask body: a config (at most 1 MiB), a command line, ids, a key, with room.
MAX_TASK_BODY_BYTES = 2 * 1024 * 1024
# A logs RPC's response: TrialLogsResponse or TaskLogsResponse.
LogsResponse = TypeVar("LogsResponse", api_pb2.TrialLogsResponse, api_pb2.TaskLogsResponse)
# How long /health waits for PostgreSQL.
HEALTH_TIMEOUT_S = 2.0


class Routes:
    def __init__(self, api: Api, authenticate: Authenticate) -> None:
        self.api = api
        self.authenticate = authenticate

    def routes(self) -> list[BaseRoute]:
        user = partial(authenticated, self.authenticate)
        stream = partial(authenticated, self.authenticate, token_parameter=True)
        experiment = "/api/v1/experiments/{experiment_id:int}"
        return [
            Route("/api/v1/experiments/stream", stream(self.experiments_stream)),
            Route(experiment + "/stream", stream(self.experiment_stream)),
            Route("/api/v1/trials/{trial_id:int}/stream", stream(self.trial_stream)),
            Route("/api/v1/cluster/stream", stream(self.cluster_stream)),
            Route("/info", unauthenticated(self.info)),
            Route("/health", unauthenticated(self.health)),
            Route("/metrics", unauthenticated(metrics_endpoint(self.api, self.authenticate))),
            Route("/api/v1/auth/login", unauthenticated(self.login), methods=["POST"]),
            Route("/api/v1/auth/logout", user(self.logout), methods=["POST"]),
            Route("/api/v1/me", user(self.me)),
            Route("/api/v1/experiments", user(self.experiments)),
            Route("/api/v1/experiments", user(self.create_experiment), methods=["POST"]),
            Route(experiment, user(self.experiment)),
            Route(experiment + "/kill", user(self.kill), methods=["POST"]),
            Route(experiment + "/pause", user(self.pause), methods=["POST"]),
            Route(experiment + "/activate", user(self.activate), methods=["POST"]),
            *experiment_edit_routes(self.api, user),
            *experiment_run_routes(self.api, user),
            Route(experiment + "/trials", user(self.experiment_trials)),
            Route("/api/v1/trials/{trial_id:int}", user(self.trial)),
            Route("/api/v1/trials/{trial_id:int}/metrics", user(self.trial_metrics)),
            Route("/api/v1/trials/{trial_id:int}/logs", user(self.trial_logs)),
            *checkpoint_routes(self.api, user),
            *sdk_routes(self.api, user),
            Route("/api/v1/tasks", user(self.tasks)),
            Route("/api/v1/tasks", user(self.launch_task), methods=["POST"]),
            Route("/api/v1/tasks/{task_id:str}", user(self.task)),
            Route("/api/v1/tasks/{task_id:str}/kill", user(self.kill_task), methods=["POST"]),
            Route("/api/v1/tasks/{task_id:str}/logs", user(self.task_logs)),
            Route("/api/v1/agents", user(self.agents)),
            *agent_routes(self.api, user),
            Route("/api/v1/job-queues", user(self.job_queues)),
            Route("/api/v1/events", user(self.events)),
            Route("/api/v1/events/explain/{kind:str}/{id:str}", user(self.explain_events)),
            Route("/api/v1/events/workload", user(self.workload)),
            Route("/", self.web_ui),
            Route("/index.html", self.web_ui),
            Mount("/ui", StaticFiles(directory=UI_DIRECTORY), name="ui"),
        ]

    # -- the web UI (static files, no token) --------------------------------------------

    async def web_ui(self, request: Request) -> Response:
        return FileResponse(UI_DIRECTORY / "index.html", headers=UI_PAGE_HEADERS)

    # -- open to anyone --------------------------------------------------------------

    async def info(self, request: Request) -> Response:
        master = await self.api.agents.get_master(api_pb2.GetMasterRequest())
        return JSONResponse(
            {
                "version": master.version,
                "master_id": master.cluster_id,
                "cluster_id": master.cluster_id,
                "cluster_name": master.cluster_name,
                "sso_providers": [],
            }
        )

    async def health(self, request: Request) -> Response:
        """Whether the parts the gateway stands on answer and the projector
        keeps up: 200 when they do ("ok"); 503 when one is down ("unavailable")
        or the projector is stuck behind the log ("stuck"). `projector` says
        how far it is, `skippedEvents` which events the gateway could not
        read or apply (services/common/skips.py)."""
        event_log = self.api.parts.store.nc.is_connected
        try:
            async with asyncio.timeout(HEALTH_TIMEOUT_S):
                read_models = await self.api.parts.queries.pool.fetchval("SELECT true") is True
        except (TimeoutError, ReadModelsUnavailableError):
            read_models = False
        projector = self.api.parts.projector
        with contextlib.suppress(TimeoutError, NatsUnavailableError):
            async with asyncio.timeout(HEALTH_TIMEOUT_S):
                await projector.look_at_log()
        progress = projector.progress()
        healthy = event_log and read_models
        status = "unavailable" if not healthy else "stuck" if progress["state"] == "stuck" else "ok"
        skips = self.api.parts.store.skips
        return JSONResponse(
            {
                "status": status,
                "eventLog": "up" if event_log else "down",
                "readModels": "up" if read_models else "down",
                "projector": {
                    "state": progress["state"],
                    "appliedSequence": progress["applied"],
                    "logLastSequence": progress["log_last"],
                    "behind": progress["behind"],
                },
                "skippedEvents": {
                    "count": skips.count,
                    "latest": [
                        {"sequence": s.sequence, "subject": s.subject, "reason": s.reason, "reader": s.reader}
                        for s in skips.latest
                    ],
                },
            },
            status_code=200 if status == "ok" else 503,
        )

    async def login(self, request: Request) -> Response:
        body = await json_body(request)
        answer = await self.api.users.login(
            api_pb2.LoginRequest(
                username=str(body.get("username", "")),
                password=str(body.get("password", "")),
                is_hashed=bool(body.get("isHashed", False)),
            ),
            address=request.client.host if request.client is not None else "",
        )
        response = JSONResponse(
            {
                "token": answer.token,
                "user": shapes.user(answer.user),
                "expiresAt": shapes.time(answer.expires_at_ns),
            }
        )
        set_session_cookie(response, request, answer.token, answer.expires_at_ns)  # for /proxy/ in a browser
        return response

    # -- users -----------------------------------------------------------------------

    async def logout(self, request: Request) -> Response:
        await self.api.users.logout(api_pb2.LogoutRequest())
        response = JSONResponse({})
        clear_session_cookie(response, request)
        return response

    async def me(self, request: Request) -> Response:
        answer = await self.api.users.get_me(api_pb2.GetMeRequest())
        return JSONResponse({"user": shapes.user(answer.user)})

    # -- experiments -----------------------------------------------------------------

    async def experiments(self, request: Request) -> Response:
        """GetExperiments with Determined's query parameters (params.experiments_request)."""
        asked = experiments_request(request)
        answer = await self.api.experiments.get_experiments(asked)
        return JSONResponse(
            {
                "experiments": [shapes.experiment(e) for e in answer.experiments],
                "pagination": shapes.pagination(
                    asked.offset, asked.limit, len(answer.experiments), answer.total
                ),
            }
        )

    async def create_experiment(self, request: Request) -> Response:
        """Determined's CreateExperiment body: `config` (the YAML text; a JSON
        object is taken too), `activate` (default false: PAUSED, as Determined),
        `validateOnly`, `modelDefinition` (the context's files, base64). The warnings about
        the config are in `configWarnings`. Ours:
        `requestId`, with which a retry answers with the first experiment;
        `parentId` forks that experiment (its context when none is sent)."""
        body = await json_body(request)
        parent_id = body.get("parentId") or 0
        if not isinstance(parent_id, int) or isinstance(parent_id, bool) or not 0 <= parent_id < 2**63:
            raise InvalidArgumentError(f"parentId must be an experiment id, not {parent_id!r:.80}")
        config = body.get("config")
        if isinstance(config, dict):
            config = json.dumps(config)
        if not isinstance(config, str) or not config.strip():
            raise InvalidArgumentError("config is required: the experiment configuration as YAML text")
        validate_only = body_flag(body, "validateOnly", False)
        created = await self.api.experiments.create(
            api_pb2.CreateExperimentRequest(
                config_yaml=config,
                context_tgz=context_archive(body.get("modelDefinition")),
                activate=body_flag(body, "activate", False),
                validate_only=validate_only,
                request_id=str(body.get("requestId") or ""),
                parent_id=parent_id,
            )
        )
        answer: dict[str, Any] = {
            "config": json.loads(created.config_json),
            # Determined's launch warnings are an enum of which none of ours is one: ours are text.
            "warnings": [],
            "configWarnings": list(created.warnings),
        }
        if validate_only:
            # Determined's: an empty experiment (id 0), which its client requires.
            return JSONResponse({"experiment": shapes.experiment(api_pb2.Experiment()), **answer})
        shown = await self.api.experiments.get_experiment(
            api_pb2.GetExperimentRequest(experiment_id=created.experiment_id)
        )
        return JSONResponse({"experiment": shapes.experiment(shown.experiment), **answer})

    async def experiment(self, request: Request) -> Response:
        answer = await self.api.experiments.get_experiment(
            api_pb2.GetExperimentRequest(experiment_id=request.path_params["experiment_id"])
        )
        return JSONResponse(
            {
                "experiment": shapes.experiment(answer.experiment),
                "config": json.loads(answer.experiment.config_json or "{}"),
            }
        )

    async def kill(self, request: Request) -> Response:
        answer = await self.api.experiments.kill_experiment(
            api_pb2.KillExperimentRequest(experiment_id=request.path_params["experiment_id"])
        )
        return JSONResponse({"unchangedReason": answer.unchanged_reason})

    async def pause(self, request: Request) -> Response:
        answer = await self.api.experiments.pause_experiment(
            api_pb2.PauseExperimentRequest(experiment_id=request.path_params["experiment_id"])
        )
        return JSONResponse({"unchangedReason": answer.unchanged_reason})

    async def activate(self, request: Request) -> Response:
        answer = await self.api.experiments.activate_experiment(
            api_pb2.ActivateExperimentRequest(experiment_id=request.path_params["experiment_id"])
        )
        return JSONResponse({"unchangedReason": answer.unchanged_reason})

    async def experiment_trials(self, request: Request) -> Response:
        answer = await self.api.experiments.get_experiment_trials(
            api_pb2.GetExperimentTrialsRequest(experiment_id=request.path_params["experiment_id"])
        )
        offset = number(request, "offset", 0, least=0)
        limit = number(request, "limit", 0, least=0)
        page = answer.trials[offset : offset + limit] if limit else answer.trials[offset:]
        return JSONResponse(
            {
                "trials": [shapes.trial(t) for t in page],
                "pagination": shapes.pagination(offset, limit, len(page), len(answer.trials)),
            }
        )

    # -- trials ----------------------------------------------------------------------

    async def trial(self, request: Request) -> Response:
        answer = await self.api.trials.get_trial(
            api_pb2.GetTrialRequest(trial_id=request.path_params["trial_id"])
        )
        return JSONResponse(
            {"trial": shapes.trial(answer.trial), "runs": [shapes.trial_run(r) for r in answer.runs]}
        )

    async def trial_metrics(self, request: Request) -> Response:
        """One metric of one group (default "training") as a chart's series:
        at most max_points (default CHART_POINTS) points, chosen by LTTB from
        the read models' preselection (Queries.metric_chart), as column arrays
        (`steps`, `values`, for uPlot), and how many there are in all."""
        trial_id = request.path_params["trial_id"]
        group = request.query_params.get("group") or "training"
        metric = request.query_params.get("metric", "")
        if not metric:
            raise InvalidArgumentError("name the metric: ?metric=<name> (e.g. loss)")
        max_points = number(request, "max_points", CHART_POINTS, least=3, most=MAX_CHART_POINTS)
        total, chosen = await self.api.trials.metric_chart(trial_id, group, metric, 2 * max_points)
        kept = lttb(chosen, max_points)
        return JSONResponse(
            {
                "trialId": trial_id,
                "group": group,
                "metric": metric,
                "totalPoints": total,
                "steps": [int(steps) for steps, _ in kept],
                "values": [value for _, value in kept],
            }
        )

    async def trial_logs(self, request: Request) -> Response:
        """Newline-delimited JSON, one `{"result": <line>}` per log line; with
        follow=true the stream stays open until the trial's logs end. An error
        once streaming has begun ends the stream with `{"error": {...}}`.
        Determined's filters and order (trial_log_params.py)."""
        trial_id = request.path_params["trial_id"]
        logs_request, newest_first = trial_log_params.trial_logs_request(request, trial_id)
        await self.api.trials.trial_status(trial_id)  # NOT_FOUND before the stream starts
        responses = self.api.logs.trial_logs(logs_request)
        if newest_first:
            responses = trial_log_params.newest_first(responses)
        # The stream is sent after this handler returned: it acts as the caller on its own.
        lines = _log_lines(responses, shapes.log_line, current_principal())
        return StreamingResponse(lines, media_type="application/x-ndjson")

    # -- tasks: notebooks, TensorBoards, commands, shells ---------------------------------

    async def tasks(self, request: Request) -> Response:
        """Every task (?task_type=NOTEBOOK|TENSORBOARD|COMMAND|SHELL: of that kind);
        ended ones with ?include_terminated=true."""
        answer = await self.api.tasks.get_tasks(
            api_pb2.GetTasksRequest(
                task_type=request.query_params.get("task_type", ""),
                include_terminated=flag(request, "include_terminated"),
            )
        )
        return JSONResponse({"tasks": [shapes.task(t) for t in answer.tasks]})

    async def launch_task(self, request: Request) -> Response:
        """LaunchTask's request in camelCase: taskType, configYaml, contextHash,
        command, experimentIds, trialIds, shellPublicKey, requestId."""
        body = await json_body(request, max_bytes=MAX_TASK_BODY_BYTES)
        answer = await self.api.tasks.launch_task(
            api_pb2.LaunchTaskRequest(
                task_type=body_str(body, "taskType"),
                config_yaml=body_str(body, "configYaml"),
                context_hash=body_str(body, "contextHash"),
                command=str_list(body, "command"),
                experiment_ids=id_list(body, "experimentIds"),
                trial_ids=id_list(body, "trialIds"),
                shell_public_key=body_str(body, "shellPublicKey"),
                request_id=body_str(body, "requestId"),
            )
        )
        return JSONResponse({"task": shapes.task(answer.task), "warnings": list(answer.warnings)})

    async def task(self, request: Request) -> Response:
        answer = await self.api.tasks.get_task(api_pb2.GetTaskRequest(task_id=request.path_params["task_id"]))
        return JSONResponse({"task": shapes.task(answer.task)})

    async def kill_task(self, request: Request) -> Response:
        answer = await self.api.tasks.kill_task(
            api_pb2.KillTaskRequest(task_id=request.path_params["task_id"])
        )
        return JSONResponse({"unchangedReason": answer.unchanged_reason})

    async def task_logs(self, request: Request) -> Response:
        """As a trial's logs (NDJSON, ?follow=true); its owner or an admin."""
        task_id = request.path_params["task_id"]
        await self.api.tasks.logs_readable(task_id)  # NOT_FOUND or PERMISSION_DENIED before streaming
        logs_request = api_pb2.TaskLogsRequest(task_id=task_id, follow=flag(request, "follow"))
        lines = _log_lines(self.api.tasks.task_logs(logs_request), shapes.task_log_line, current_principal())
        return StreamingResponse(lines, media_type="application/x-ndjson")

    # -- live pages: server-sent events (live.py) ------------------------------------------

    async def experiments_stream(self, request: Request) -> Response:
        return self._notices({watched.SHOWN_EXPERIMENTS})

    async def experiment_stream(self, request: Request) -> Response:
        """The experiment's page: its row and its trials'; the trials are asked
        again after each notice, as the searcher creates more."""
        experiment_id = request.path_params["experiment_id"]
        await self.api.experiments.known(experiment_id)

        async def names() -> set[str]:
            trials = await self.api.trials.trial_ids(experiment_id)
            return {watched.shown_experiment(experiment_id), *map(watched.shown_trial, trials)}

        return self._notices(await names(), names)

    async def trial_stream(self, request: Request) -> Response:
        trial_id = request.path_params["trial_id"]
        await self.api.trials.trial_status(trial_id)  # NOT_FOUND for an unknown trial
        return self._notices({watched.shown_trial(trial_id)})

    async def cluster_stream(self, request: Request) -> Response:
        return self._notices({watched.SHOWN_CLUSTER})

    def _notices(self, names: set[str], renamed: live.Names | None = None) -> Response:
        changes = live.notices(self.api.parts.projector, names, renamed)
        return StreamingResponse(changes, media_type=live.MEDIA_TYPE, headers=live.HEADERS)

    # -- checkpoints and the cluster ---------------------------------------------------

    async def agents(self, request: Request) -> Response:
        answer = await self.api.agents.get_agents(api_pb2.GetAgentsRequest())
        return JSONResponse({"agents": [shapes.agent(a) for a in answer.agents]})

    async def job_queues(self, request: Request) -> Response:
        answer = await self.api.jobs.get_jobs(
            api_pb2.GetJobsRequest(resource_pool=request.query_params.get("resourcePool", ""))
        )
        return JSONResponse(
            {"jobs": [shapes.job(j) for j in answer.jobs], "schedulers": dict(answer.schedulers)}
        )

    # -- the event log -------------------------------------------------------------------

    async def events(self, request: Request) -> Response:
        """det events over HTTP: `{"events": [LoggedEvent in protobuf's JSON form]}`,
        at most events.service.MAX_PAGE_EVENTS, never following (params.event_filter)."""
        answer = await self.api.events.events_page(
            api_pb2.GetEventsRequest(
                filter=event_filter(request),
                limit=number(request, "limit", 0, least=0),
                tail=flag(request, "tail"),
            )
        )
        return JSONResponse({"events": [json_format.MessageToDict(event) for event in answer.events]})

    async def explain_events(self, request: Request) -> Response:
        """det events explain over HTTP: `{"chain": [{"event": LoggedEvent, "depth": n}], "outcome": ".."}`."""
        answer = await self.api.explanations.explain_events(
            api_pb2.ExplainEventsRequest(kind=request.path_params["kind"], id=request.path_params["id"])
        )
        chain = [
            {"event": json_format.MessageToDict(node.event), "depth": node.depth} for node in answer.chain
        ]
        return JSONResponse({"chain": chain, "outcome": answer.outcome})

    async def workload(self, request: Request) -> Response:
        """GetWorkload over HTTP (admins): ?since=&until= (Unix nanoseconds or ISO 8601);
        the answer in protobuf's JSON form."""
        workload = api_pb2.GetWorkloadRequest(
            since_ns=time_ns(request, "since"), until_ns=time_ns(request, "until")
        )
        return JSONResponse(json_format.MessageToDict(await self.api.workloads.get_workload(workload)))


async def _log_lines(
    responses: AsyncIterator[LogsResponse],
    shown: Callable[[LogsResponse, Any], dict[str, Any]],
    caller: Principal,
) -> AsyncIterator[bytes]:
    """A logs RPC's lines as NDJSON, one `{"result": <line as `shown`>}` each;
    an error once streaming has begun ends it with `{"error": {...}}`."""
    with acting_as(caller):
        try:
            async for response in responses:
                yield b"".join(
                    json.dumps({"result": shown(response, line)}).encode() + b"\n" for line in response.lines
                )
        except Exception as error:
            gateway_error = as_gateway_error(error)
            if gateway_error is None:
                raise
            yield json.dumps({"error": error_body(gateway_error)}).encode() + b"\n"
