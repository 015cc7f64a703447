"""The scheduler's pure core: which allocation request gets which agents'
slots, and which running allocation must give them back.

It reads allocation requests (of any task: a trial today, commands and
notebooks later), agents and their states, job settings and allocation
exits; what an allocation's end means for its task is the task owner's
business (services/searcher/lifecycle.py).

Decides, every time it is asked (each decision is a pure function of the
state, and message ids derived from the allocation make a repeat harmless):
- AllocationCanceled: a request asked to stop or die before it was assigned
  (nothing ran, so no agent will ever report its exit);
- AllocationExited(agent_lost): an open allocation on an agent that was lost;
- AllocationKillRequested / AllocationExited for a gang spanning several
  agents: the first part that fails takes the rest down, and the allocation
  exits once every part did (gang.py);
- AllocationStopRequested: an allocation on an agent, or a slot, disabled without drain;
- per resource pool (pool.py), by the pool's scheduler (fair_share.py or
  priority.py): AllocationAssigned (placements by fitting.py; its reason
  says, for people, what the pool's scheduler saw and why there) and
  AllocationStopRequested for preemption.

Time is the log's: the newest folded envelope's occurred_at_ns, or a clock
tick the shell folds when the log is quiet (`tick`), so that a min-run guard
that expires with nothing happening still lets a preemption through.
"""

from functools import partial

from determined.proto import events_pb2
from services.common.decider import PureCore
from services.common.envelope import Append, aggregate
from services.common.reasons import capped
from services.common.scheduling import PRIORITY
from services.scheduler import fair_share, priority
from services.scheduler.config import SchedulerConfig
from services.scheduler.gang import allocation_exited, gang_decisions
from services.scheduler.pool import Plan, Pool, pools_of
from services.scheduler.state import SCHEDULER_FOLDS, AgentView, Request, SchedulerState, evolve, tick

DEFAULT_CONFIG = SchedulerConfig()

__all__ = ["SCHEDULER_FOLDS", "AgentView", "SchedulerCore", "SchedulerState", "decide", "tick"]


class SchedulerCore(PureCore[SchedulerState]):
    def __init__(self, config: SchedulerConfig = DEFAULT_CONFIG) -> None:
        self.config = config
        super().__init__(SCHEDULER_FOLDS, SchedulerState, evolve, partial(decide, config=config), tick=tick)


def decide(state: SchedulerState, config: SchedulerConfig = DEFAULT_CONFIG) -> list[Append]:
    appends: list[Append] = []
    lost = {agent_id for agent_id, agent in state.agents.items() if agent.lost}
    disabled = {
        agent_id for agent_id, agent in state.agents.items() if not agent.enabled and not agent.draining
    }
    stopped = {agent_id: slots for agent_id, agent in state.agents.items() if (slots := agent.stopped_slots)}
    for request in state.requests.values():
        if not request.placements:
            if request.withdrawn:
                appends.append(_canceled(request))
            continue
        if lost or disabled or stopped or request.part_exits:
            appends += _closing(state, request, lost, disabled, stopped)
    for pool in pools_of(state, config).values():
        appends += _decisions(pool, plan_pool(pool, state, config))
    return appends


def plan_pool(pool: Pool, state: SchedulerState, config: SchedulerConfig, explain: bool = False) -> Plan:
    if config.type_of(pool.name) == PRIORITY:
        return priority.plan(pool, state.now_ns, config.min_run_ns, explain)
    return fair_share.plan(pool, state.now_ns, config.min_run_ns, explain)


def _decisions(pool: Pool, plan: Plan) -> list[Append]:
    appends = [
        _assigned(request, placements, pool, plan.reasons.get(request.allocation_id, ""))
        for request, placements in plan.starts
    ]
    for request, why in plan.victims:
        msg_id = f"allocation-preempt-{request.allocation_id}"
        appends.append(_stop(request, msg_id, f"preempted by the scheduler: {why}"))
    return appends


def _closing(
    state: SchedulerState,
    request: Request,
    lost: set[str],
    disabled: set[str],
    stopped: dict[str, frozenset[int]],
) -> list[Append]:
    """What ends or stops an open allocation: a lost agent, a gang's exits, a
    disabled agent, a slot disabled without drain (`stopped`: agent -> such slots)."""
    agent_ids = [agent_id for agent_id, _ in request.placements]
    lost_agent = next((a for a in agent_ids if a in lost), None)
    if lost_agent is not None:
        return [_lost(request, lost_agent, state.agents[lost_agent].lost_reason)]
    if request.part_exits:
        return gang_decisions(request)
    if request.withdrawn:
        return []
    disabled_agent = next((a for a in agent_ids if a in disabled), None)
    if disabled_agent is not None:
        msg_id = f"allocation-stop-disabled-{request.allocation_id}"
        return [_stop(request, msg_id, f"agent {disabled_agent} disabled")]
    on_stopped = [(a, s) for a, slot_ids in request.placements for s in slot_ids if s in stopped.get(a, ())]
    if not on_stopped:
        return []
    agent_id, slot_id = on_stopped[0]
    msg_id = f"allocation-stop-slot-disabled-{request.allocation_id}"
    return [_stop(request, msg_id, f"slot {slot_id} of agent {agent_id} disabled")]


def _canceled(request: Request) -> Append:
    event = events_pb2.AllocationCanceled(
        allocation_id=request.allocation_id,
        task_id=request.requested.task_id,
        reason="stopped before it was assigned slots",
    )
    return Append(
        aggregate("allocation", request.allocation_id), event, f"allocation-canceled-{request.allocation_id}"
    )


def _lost(request: Request, agent_id: str, reason: str) -> Append:
    error = f"agent {agent_id} lost: {reason}" if reason else f"agent {agent_id} lost"
    return allocation_exited(request, agent_id, exit_code=-1, error=error, agent_lost=True)


def _stop(request: Request, msg_id: str, reason: str) -> Append:
    event = events_pb2.AllocationStopRequested(
        allocation_id=request.allocation_id, task_id=request.requested.task_id, reason=reason
    )
    return Append(aggregate("allocation", request.allocation_id), event, msg_id)


def _assigned(
    request: Request, placements: list[tuple[str, tuple[int, ...]]], pool: Pool, reason: str
) -> Append:
    event = events_pb2.AllocationAssigned(
        allocation_id=request.allocation_id,
        task_id=request.requested.task_id,
        placements=[
            events_pb2.Placement(agent_id=agent_id, slot_ids=slot_ids, address=pool.addresses[agent_id])
            for agent_id, slot_ids in placements
        ],
        reason=capped(reason),
    )
    return Append(
        aggregate("allocation", request.allocation_id),
        event,
        f"allocation-assigned-{request.allocation_id}",
    )
