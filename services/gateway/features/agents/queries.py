"""Queries of agents and their slots, answered from the read models, and the
converter from their rows to the API's messages."""

import json
from collections.abc import Mapping
from typing import Any

import asyncpg

from determined.proto import api_pb2
from services.common.scheduling import DEFAULT_POOL
from services.gateway.read_models import SCHEMA as S
from services.gateway.read_models import ReadModels

# The assigned allocations that have not exited (the partial index allocations_running).
_RUNNING_ALLOCATIONS = f"""
SELECT a.allocation_id, a.trial_id, a.placements::text AS placements, t.experiment_id
FROM {S}.allocations a LEFT JOIN {S}.trials t ON t.id = a.trial_id
WHERE a.placements IS NOT NULL AND a.exited_at_ns IS NULL AND NOT a.canceled
"""


class AgentQueries:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = ReadModels(pool)

    async def agents(self) -> list[api_pb2.Agent]:
        """Every agent, with what runs on each of its slots now."""
        rows = await self.pool.fetch(f"SELECT * FROM {S}.agents ORDER BY agent_id")
        running = await self.pool.fetch(_RUNNING_ALLOCATIONS)
        uses: dict[tuple[str, int], api_pb2.SlotUse] = {}
        for allocation in running:
            for placement in json.loads(allocation["placements"]):
                for slot_id in placement["slot_ids"]:
                    uses[(placement["agent_id"], slot_id)] = api_pb2.SlotUse(
                        slot_id=slot_id,
                        allocation_id=allocation["allocation_id"],
                        trial_id=allocation["trial_id"],
                        experiment_id=allocation["experiment_id"] or 0,
                    )
        return [agent_message(row, uses) for row in rows]

    async def agent_state(self, agent_id: str) -> str | None:
        """ENABLED, DISABLED or DRAINING (what an operator made of it); None: no such agent."""
        state = await self.pool.fetchval(f"SELECT state FROM {S}.agents WHERE agent_id = $1", agent_id)
        return None if state is None else str(state)

    async def slot_states(self, agent_id: str) -> dict[int, str] | None:
        """Each slot of the agent: ENABLED, DISABLED or DRAINING (what an admin
        made of it); None: no such agent."""
        row = await self.pool.fetchrow(
            f"SELECT slots, disabled_slots FROM {S}.agents WHERE agent_id = $1", agent_id
        )
        if row is None:
            return None
        disabled = json.loads(row["disabled_slots"])
        return {
            slot["slot_id"]: disabled.get(str(slot["slot_id"]), "ENABLED")
            for slot in json.loads(row["slots"])
        }

    async def resource_pools(self) -> list[str]:
        """The pools of the registered agents, and "default" (always known), sorted."""
        pools = await self.pool.fetch(f"SELECT DISTINCT resource_pool FROM {S}.agents")
        return sorted({str(row[0]) or DEFAULT_POOL for row in pools} | {DEFAULT_POOL})

    async def pool_runtimes(self, pool: str) -> set[str]:
        """How the agents of `pool` run allocations (empty: it has no agent)."""
        rows = await self.pool.fetch(
            f"SELECT DISTINCT runtime FROM {S}.agents WHERE coalesce(nullif(resource_pool, ''), $2) = $1",
            pool,
            DEFAULT_POOL,
        )
        return {str(row[0]) for row in rows}


def agent_message(row: Mapping[str, Any], uses: Mapping[tuple[str, int], api_pb2.SlotUse]) -> api_pb2.Agent:
    """`uses`: (agent id, slot id) -> what runs there (a slot not in it is free)."""
    agent_id = row["agent_id"]
    agent = api_pb2.Agent(
        agent_id=agent_id,
        hostname=row["hostname"],
        registered_at_ns=row["registered_at_ns"],
        resource_pool=row["resource_pool"] or DEFAULT_POOL,
        address=row["address"] or row["hostname"],
        runtime=row["runtime"],
    )
    disabled = json.loads(row["disabled_slots"])
    for slot in json.loads(row["slots"]):
        agent.slots.add(slot_id=slot["slot_id"], type=slot["type"], device=slot["device"])
        use = api_pb2.SlotUse()
        use.CopyFrom(uses.get((agent_id, slot["slot_id"])) or api_pb2.SlotUse(slot_id=slot["slot_id"]))
        use.state = slot_state(disabled.get(str(slot["slot_id"]), "ENABLED"), busy=bool(use.allocation_id))
        agent.slot_uses.append(use)
    agent.state = agent_state(
        row["state"], lost=row["lost"], busy=any(use.allocation_id for use in agent.slot_uses)
    )
    return agent


def slot_state(state: str, *, busy: bool) -> str:
    """What `det slot list` shows: a draining slot shows DISABLED once nothing runs on it."""
    return "DISABLED" if state == "DRAINING" and not busy else state


def agent_state(state: str, *, lost: bool, busy: bool) -> str:
    """What `det agent list` shows: LOST while its registration is lost; a
    draining agent shows DISABLED once nothing runs on it."""
    if lost:
        return "LOST"
    if state == "DRAINING" and not busy:
        return "DISABLED"
    return state
