"""The scheduler: `python -m services.scheduler`.

Settings (env): DET_NATS_URL, DET_NAMESPACE, DET_READY_FILE, DET_LOG_*, and
- DET_AGENT_LOST_S (10): an agent run not heard from for this long is lost
  (it sends a heartbeat every DET_AGENT_HEARTBEAT_S, the agent's setting:
  keep this several of those);
- DET_SCHEDULER_TYPE (fair_share | priority): a pool's scheduler, unless
  DET_SCHEDULER_POOL_TYPES ("gpu=priority,cpu=fair_share") names its own;
- DET_SCHEDULER_MIN_RUN_S (30): no allocation is preempted before it ran
  this long;
- DET_SCHEDULER_DEFAULT_PRIORITY (42): the priority of a request that gives none.
"""

import asyncio
import time
from typing import Annotated

from pydantic import Field, field_validator

from services.common.cancelling import cancel_and_wait
from services.common.envelope import Append
from services.common.heartbeats import HeartbeatListener
from services.common.job_queue import KvJobQueueBoard
from services.common.scheduling import DEFAULT_PRIORITY, SCHEDULER_TYPES
from services.common.service import connect_part, run_shells, serve
from services.common.settings import CommonSettings
from services.scheduler.config import SchedulerConfig
from services.scheduler.core import SchedulerCore
from services.scheduler.liveness import lost_agents
from services.scheduler.publishing import QueuePublisher
from services.scheduler.state import SchedulerState

NAME = "scheduler"
# With no event for this long, the scheduler looks at the clock: a minimum
# run time may have passed, an agent may have gone silent.
TICK_S = 1.0


class SchedulerSettings(CommonSettings):
    agent_lost_s: Annotated[float, Field(gt=0)] = 10.0
    scheduler_type: str = "fair_share"
    # "gpu=priority,cpu=fair_share": pools whose scheduler is not scheduler_type.
    scheduler_pool_types: str = ""
    scheduler_min_run_s: Annotated[float, Field(ge=0)] = 30.0
    scheduler_default_priority: int = DEFAULT_PRIORITY

    @field_validator("scheduler_type")
    @classmethod
    def _known_type(cls, value: str) -> str:
        if value not in SCHEDULER_TYPES:
            raise ValueError(f"{value!r} is not one of {', '.join(SCHEDULER_TYPES)}")
        return value

    @field_validator("scheduler_pool_types")
    @classmethod
    def _pool_types_parse(cls, value: str) -> str:
        _pool_types(value)
        return value

    def scheduler_config(self) -> SchedulerConfig:
        return SchedulerConfig(
            default_type=self.scheduler_type,
            pool_types=_pool_types(self.scheduler_pool_types),
            min_run_s=self.scheduler_min_run_s,
            default_priority=self.scheduler_default_priority,
        )


def _pool_types(setting: str) -> dict[str, str]:
    """The pools of DET_SCHEDULER_POOL_TYPES: "gpu=priority,cpu=fair_share" ->
    {"gpu": "priority", "cpu": "fair_share"}; ValueError naming a malformed entry."""
    pools: dict[str, str] = {}
    for entry in filter(None, (part.strip() for part in setting.split(","))):
        pool, equals, kind = (part.strip() for part in entry.partition("="))
        if not (pool and equals and kind in SCHEDULER_TYPES):
            raise ValueError(f"{entry!r} is not POOL={' or POOL='.join(SCHEDULER_TYPES)}")
        pools[pool] = kind
    return pools


class LivenessMonitor:
    """The scheduler Shell's `on_state` hook: after each fold and clock tick,
    AgentLost for every agent run the listener has not heard from for the
    timeout (services/scheduler/liveness.py decides which)."""

    def __init__(self, listener: HeartbeatListener, lost_s: float) -> None:
        self.listener = listener
        self.timeout_ns = int(lost_s * 1e9)
        # Registration event id -> when this monitor first saw it (current ones only).
        self.registered_ns: dict[str, int] = {}

    async def on_state(self, state: SchedulerState) -> list[Append]:
        now_ns = time.time_ns()
        self.registered_ns = {
            agent.registration_event_id: self.registered_ns.get(agent.registration_event_id, now_ns)
            for agent in state.agents.values()
        }
        since_ns = self.listener.hearing_since(now_ns)
        if since_ns is None:  # nats-server is unreachable: the silence is ours
            return []
        lost = lost_agents(
            state.agents, self.listener.last, self.registered_ns, since_ns, now_ns, self.timeout_ns
        )
        if lost and not await self.listener.still_hearing(since_ns):
            return []
        return lost


async def run(settings: SchedulerSettings) -> None:
    """Listens for agents' heartbeats, rebuilds the scheduler's state from the
    log, then decides (also when the clock ticks) and publishes the job queue
    until cancelled."""
    store = await connect_part(settings, NAME)
    publishing: asyncio.Task[None] | None = None
    try:
        listener = HeartbeatListener(store.nc, settings.namespace)
        await listener.start()
        monitor = LivenessMonitor(listener, settings.agent_lost_s)
        core = SchedulerCore(settings.scheduler_config())
        publisher = QueuePublisher(KvJobQueueBoard(store), core.config, core.kinds)
        publishing = asyncio.create_task(publisher.run(), name="job-queue-publisher")
        await run_shells(
            store,
            settings,
            core,
            name=NAME,
            tick_s=TICK_S,
            on_state=monitor.on_state,
            on_position=publisher.on_position,
        )
    finally:
        if publishing is not None:
            await cancel_and_wait(publishing)
        await store.close()


def main() -> None:
    serve(NAME, SchedulerSettings(), run)


if __name__ == "__main__":
    main()
