"""Routes that Determined's own client calls (its `det` and SDK) and our own had no route
for: GET /api/v1/master (`det master info`), /api/v1/resource-pools and /api/v1/job-queues-v2
(`det job list`), GET /api/v1/users (`det user list`, `client.list_users()`) and DELETE
/api/v1/experiments/{id} (`det e delete`), answered by the same features as GetMaster, GetAgents,
GetJobs, GetTasks, GetUsers and DeleteExperiment. Determined's fields that mean nothing here
(cloud pools, branding, RBAC) have its defaults.
"""

from collections import Counter
from functools import partial
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from determined.proto import api_pb2
from services.common.scheduling import DEFAULT_POOL, FAIR_SHARE
from services.gateway.api import Api
from services.gateway.http import shapes
from services.gateway.http.app import Authenticate, authenticated, unauthenticated
from services.gateway.http.params import number

JSON = dict[str, Any]
# A pool's answer: Determined's static pool of agents, with its defaults for what it
# configures (docker images, cloud instances, startup scripts) and this cluster has none of.
STATIC_POOL: JSON = {
    "description": "",
    "type": "RESOURCE_POOL_TYPE_STATIC",
    "defaultAuxPool": False,
    "preemptible": False,
    "minAgents": 0,
    "maxAgents": 0,
    "instanceType": "",
    "masterUrl": "",
    "masterCertName": "",
    "startupScript": "",
    "containerStartupScript": "",
    "agentDockerNetwork": "",
    "agentDockerRuntime": "",
    "agentDockerImage": "",
    "agentFluentImage": "",
    "maxIdleAgentPeriod": 0.0,
    "maxAgentStartingPeriod": 0.0,
    "details": {},
    "schedulerFittingPolicy": "FITTING_POLICY_BEST",
    "location": "",
    "imageId": "",
    "auxContainerCapacity": 0,
    "auxContainersRunning": 0,
    "auxContainerCapacityPerAgent": 0,
    "resourceManagerMetadata": {},
}


def client_routes(api: Api, authenticate: Authenticate) -> list[BaseRoute]:
    user = partial(authenticated, authenticate)
    answers = ClientAnswers(api)
    return [
        # Open to anyone, as Determined's (and /info, which says as much).
        Route("/api/v1/master", unauthenticated(answers.master)),
        Route("/api/v1/resource-pools", user(answers.resource_pools)),
        Route("/api/v1/job-queues-v2", user(answers.jobs_v2)),
        Route("/api/v1/users", user(answers.users)),
        Route("/api/v1/experiments/{experiment_id:int}", user(answers.delete_experiment), methods=["DELETE"]),
    ]


class ClientAnswers:
    def __init__(self, api: Api) -> None:
        self.api = api

    async def master(self, request: Request) -> Response:
        master = await self.api.agents.get_master(api_pb2.GetMasterRequest())
        return JSONResponse(
            {
                "version": master.version,
                "masterId": master.cluster_id,
                "clusterId": master.cluster_id,
                "clusterName": master.cluster_name,
                "telemetryEnabled": False,
                "ssoProviders": [],
                "hasCustomLogo": False,
                "strictJobQueueControl": False,
                "rbacEnabled": False,
                "userManagementEnabled": True,
                "featureSwitches": [],
            }
        )

    async def resource_pools(self, request: Request) -> Response:
        """Each pool that has agents or jobs, with its scheduler (GetJobs) and slots (GetAgents)."""
        jobs = await self.api.jobs.get_jobs(api_pb2.GetJobsRequest())
        agents = (await self.api.agents.get_agents(api_pb2.GetAgentsRequest())).agents
        master = await self.api.agents.get_master(api_pb2.GetMasterRequest())
        names = sorted(set(jobs.schedulers) | {agent.resource_pool for agent in agents} | {DEFAULT_POOL})
        pools = [
            resource_pool(name, name == DEFAULT_POOL, jobs, agents, master.cluster_name) for name in names
        ]
        return JSONResponse(
            {"resourcePools": pools, "pagination": shapes.pagination(0, 0, len(pools), len(pools))}
        )

    async def jobs_v2(self, request: Request) -> Response:
        """The queue as Determined's GetJobsV2: each job in full (`{"full": v1Job}`), a page of
        them (offset, limit: 0 all), in queue order or (orderBy=ORDER_BY_DESC) reversed."""
        offset = number(request, "offset", 0, least=0)
        limit = number(request, "limit", 0, least=0)
        pool = request.query_params.get("resourcePool", "")
        jobs = list((await self.api.jobs.get_jobs(api_pb2.GetJobsRequest(resource_pool=pool))).jobs)
        if request.query_params.get("orderBy", "").upper() == "ORDER_BY_DESC":
            jobs.reverse()
        page = jobs[offset : offset + limit] if limit else jobs[offset:]
        task_types = await self._task_types() if any(job.type != "EXPERIMENT" for job in page) else {}
        return JSONResponse(
            {
                "jobs": [{"full": shapes.job(job, self._type(job, task_types))} for job in page],
                "pagination": shapes.pagination(offset, limit, len(page), len(jobs)),
            }
        )

    async def users(self, request: Request) -> Response:
        """Every user (`active=true`: the active ones, `active=false`: the others), on one page."""
        active = request.query_params.get("active")
        shown = await self.api.users.get_users(api_pb2.GetUsersRequest(include_inactive=active != "true"))
        users = [user for user in shown.users if active != "false" or not user.active]
        return JSONResponse(
            {
                "users": [shapes.user(user) for user in users],
                "pagination": shapes.pagination(0, 0, len(users), len(users)),
            }
        )

    async def delete_experiment(self, request: Request) -> Response:
        experiment_id = request.path_params["experiment_id"]
        await self.api.checkpoints.delete_experiment(
            api_pb2.DeleteExperimentRequest(experiment_id=experiment_id)
        )
        return JSONResponse({})

    @staticmethod
    def _type(job: api_pb2.Job, task_types: dict[str, str]) -> str:
        """The job's type as Determined names it (a task that ended meanwhile: UNSPECIFIED)."""
        return "" if job.type == "EXPERIMENT" else task_types.get(job.job_id, "UNSPECIFIED")

    async def _task_types(self) -> dict[str, str]:
        """Each task job's job id and its task type (NOTEBOOK, COMMAND, ...)."""
        tasks = await self.api.tasks.get_tasks(api_pb2.GetTasksRequest())
        return {task.job_id: task.task_type for task in tasks.tasks}


def resource_pool(
    name: str, default: bool, jobs: api_pb2.GetJobsResponse, agents: list[api_pb2.Agent], cluster_name: str
) -> JSON:
    """One pool as Determined's v1ResourcePool."""
    mine = [agent for agent in agents if agent.resource_pool == name]
    slots = [slot for agent in mine for slot in agent.slots]
    used = sum(1 for agent in mine for use in agent.slot_uses if use.allocation_id)
    queued = Counter(job.state for job in jobs.jobs if job.resource_pool == name)
    kinds = {slot.type for slot in slots}
    return {
        **STATIC_POOL,
        "name": name,
        "clusterName": cluster_name,
        "defaultComputePool": default,
        "numAgents": len(mine),
        "slotsAvailable": len(slots),
        "slotsUsed": used,
        "slotsPerAgent": max((len(agent.slots) for agent in mine), default=0),
        "slotType": f"TYPE_{kinds.pop().upper()}" if len(kinds) == 1 else "TYPE_UNSPECIFIED",
        "schedulerType": f"SCHEDULER_TYPE_{jobs.schedulers.get(name, FAIR_SHARE).upper()}",
        "stats": {"queuedCount": queued["QUEUED"], "scheduledCount": queued["SCHEDULED"]},
    }
