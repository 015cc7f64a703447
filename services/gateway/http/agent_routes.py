"""Determined's REST routes that enable and disable agents and slots (det
agent enable|disable, det slot enable|disable; an admin's only), over the
same feature functions as gRPC (features/agents):

- POST /api/v1/agents/{agent_id}/enable and /disable (body {"drain": bool}):
  {"agent": <the agent>};
- POST /api/v1/agents/{agent_id}/slots/{slot_id}/enable and /disable (body
  {"drain": bool}): {"slot": <the slot>}.
"""

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from determined.proto import api_pb2
from services.gateway.api import Api
from services.gateway.http import shapes
from services.gateway.http.params import body_flag, json_body

Handler = Callable[[Request], Awaitable[Response]]
# A disable's body: {"drain": true} and little else.
MAX_BODY_BYTES = 4096


def agent_routes(api: Api, user: Callable[[Handler], Handler]) -> list[Route]:
    """The routes, each run as the calling user (`user`)."""
    agents = api.agents
    agent = "/api/v1/agents/{agent_id:str}"
    slot = agent + "/slots/{slot_id:int}"

    async def shown(agent_id: str) -> Response:
        [found] = [
            a for a in (await agents.get_agents(api_pb2.GetAgentsRequest())).agents if a.agent_id == agent_id
        ]
        return JSONResponse({"agent": shapes.agent(found)})

    async def enable_agent(request: Request) -> Response:
        agent_id = request.path_params["agent_id"]
        await agents.enable_agent(api_pb2.EnableAgentRequest(agent_id=agent_id))
        return await shown(agent_id)

    async def disable_agent(request: Request) -> Response:
        agent_id = request.path_params["agent_id"]
        await agents.disable_agent(
            api_pb2.DisableAgentRequest(agent_id=agent_id, drain=await _drain(request))
        )
        return await shown(agent_id)

    async def enable_slot(request: Request) -> Response:
        asked = api_pb2.EnableSlotRequest(agent_id=request.path_params["agent_id"], slot_id=_slot_id(request))
        return _slot(await agents.enable_slot(asked), asked.slot_id)

    async def disable_slot(request: Request) -> Response:
        asked = api_pb2.DisableSlotRequest(
            agent_id=request.path_params["agent_id"], slot_id=_slot_id(request), drain=await _drain(request)
        )
        return _slot(await agents.disable_slot(asked), asked.slot_id)

    return [
        Route(agent + "/enable", user(enable_agent), methods=["POST"]),
        Route(agent + "/disable", user(disable_agent), methods=["POST"]),
        Route(slot + "/enable", user(enable_slot), methods=["POST"]),
        Route(slot + "/disable", user(disable_slot), methods=["POST"]),
    ]


async def _drain(request: Request) -> bool:
    body = await json_body(request, MAX_BODY_BYTES)
    return body_flag(body, "drain", False)


def _slot_id(request: Request) -> int:
    """The path's slot id, bounded as the API's int32 (a larger one names no slot)."""
    return min(int(request.path_params["slot_id"]), 2**31 - 1)


def _slot(answer: api_pb2.EnableSlotResponse | api_pb2.DisableSlotResponse, slot_id: int) -> Response:
    return JSONResponse({"slot": shapes.agent(answer.agent)["slots"][str(slot_id)]})
