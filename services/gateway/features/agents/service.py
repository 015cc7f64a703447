"""The cluster's and the agents' functions (det master info, det agent
list|enable|disable), which the gRPC servicer and the HTTP routes call."""

from collections.abc import Callable
from importlib import metadata

from determined.proto import api_pb2
from services.common.envelope import Append, aggregate
from services.common.eventlog import ConflictError
from services.gateway.auth import current_principal, require_admin
from services.gateway.errors import FailedPreconditionError, NotFoundError
from services.gateway.features.agents import commands
from services.gateway.features.agents.cluster_parts import cluster_parts
from services.gateway.features.commands import Unchanged
from services.gateway.features.events.as_of import AsOfReads
from services.gateway.features.events.as_of_point import asked
from services.gateway.features.parts import FeatureService, Parts


class Agents(FeatureService):
    def __init__(self, parts: Parts) -> None:
        super().__init__(parts)
        self._as_of = AsOfReads(parts)

    async def get_master(self, request: api_pb2.GetMasterRequest) -> api_pb2.GetMasterResponse:
        return api_pb2.GetMasterResponse(
            version=_version(),
            cluster_id=self.settings.cluster_id,
            cluster_name=self.settings.cluster_name,
            parts=cluster_parts(self.settings.status_file),
            nats_url=self.settings.advertised_nats_url or self.settings.nats_url,
            namespace=self.settings.namespace,
            http_port=self.settings.http_port or 0,
        )

    async def get_agents(self, request: api_pb2.GetAgentsRequest) -> api_pb2.GetAgentsResponse:
        if asked(request.as_of):
            return await self._as_of.agents(request)
        return api_pb2.GetAgentsResponse(agents=await self.queries.agents.agents())

    async def enable_agent(self, request: api_pb2.EnableAgentRequest) -> api_pb2.EnableAgentResponse:
        def decide(state: str, owner: str, version: int) -> Append | Unchanged:
            return commands.agent_enabled(request.agent_id, state, owner, version)

        return api_pb2.EnableAgentResponse(
            unchanged_reason=await self._change_agent(request.agent_id, decide)
        )

    async def disable_agent(self, request: api_pb2.DisableAgentRequest) -> api_pb2.DisableAgentResponse:
        def decide(state: str, owner: str, version: int) -> Append | Unchanged:
            return commands.agent_disabled(request.agent_id, state, request.drain, owner, version)

        return api_pb2.DisableAgentResponse(
            unchanged_reason=await self._change_agent(request.agent_id, decide)
        )

    async def enable_slot(self, request: api_pb2.EnableSlotRequest) -> api_pb2.EnableSlotResponse:
        agent = await self._change_slot(request.agent_id, request.slot_id, "ENABLED")
        return api_pb2.EnableSlotResponse(agent=agent)

    async def disable_slot(self, request: api_pb2.DisableSlotRequest) -> api_pb2.DisableSlotResponse:
        wanted = "DRAINING" if request.drain else "DISABLED"
        return api_pb2.DisableSlotResponse(
            agent=await self._change_slot(request.agent_id, request.slot_id, wanted)
        )

    async def _change_slot(self, agent_id: str, slot_id: int, wanted: str) -> api_pb2.Agent:
        """The slot made `wanted` (ENABLED, DISABLED or DRAINING), against the
        agent's version; the agent as det agent list then shows it. An admin's only."""
        require_admin("enabling or disabling a slot")
        version = await self._agent_version(agent_id)
        slots = await self.queries.agents.slot_states(agent_id)
        if slots is None:
            raise NotFoundError(_no_agent(agent_id))
        if slot_id not in slots:
            raise NotFoundError(f"agent {agent_id} has no slot {slot_id}; det slot list shows its slots")
        decision = commands.slot_changed(agent_id, slot_id, slots[slot_id], wanted, version)
        if isinstance(decision, Append):
            try:
                sequence, _ = await self.store.append(decision, actor=current_principal().actor)
            except ConflictError as error:
                raise FailedPreconditionError(f"agent {agent_id} changed meanwhile; try again") from error
            await self.projector.wait_for(sequence)
        [agent] = [a for a in await self.queries.agents.agents() if a.agent_id == agent_id]
        return agent

    async def _agent_version(self, agent_id: str) -> int:
        """The sequence of the agent's last event, once the read models hold it."""
        stored = await self.store.last_event(aggregate("agent", agent_id)) if agent_id else None
        if stored is None:
            raise NotFoundError(_no_agent(agent_id))
        await self.projector.wait_for(stored.sequence)
        return stored.sequence

    async def _change_agent(
        self, agent_id: str, decide: Callable[[str, str, int], Append | Unchanged]
    ) -> str:
        """Appends what `decide` makes of the agent's state (against the agent's
        version: a change meanwhile fails the append); why nothing changed, else "".
        An admin's only."""
        require_admin("enabling or disabling an agent")
        version = await self._agent_version(agent_id)
        state = await self.queries.agents.agent_state(agent_id)
        if state is None:
            raise NotFoundError(_no_agent(agent_id))
        principal = current_principal()
        decision = decide(state, principal.actor.partition(":")[2], version)
        if isinstance(decision, Unchanged):
            return decision.reason
        try:
            sequence, _ = await self.store.append(decision, actor=principal.actor)
        except ConflictError as error:
            raise FailedPreconditionError(f"agent {agent_id} changed meanwhile; try again") from error
        await self.projector.wait_for(sequence)  # det agent list shows it at once
        return ""


def _no_agent(agent_id: str) -> str:
    return f"agent {agent_id!r} not found; det agent list shows the agents"


def _version() -> str:
    try:
        return metadata.version("determined-es")
    except metadata.PackageNotFoundError:
        return "0.0.0"
