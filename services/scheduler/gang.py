"""A gang spanning several agents ends as one: each agent reports its part's
exit (AllocationResourcesExited); the first part that fails gets the others
killed, and once every part has exited the allocation exits, as a
single-agent allocation's agent would have reported it."""

from determined.proto import events_pb2
from services.common.envelope import Append, aggregate
from services.scheduler.state import Request


def allocation_exited(
    request: Request,
    agent_id: str,
    *,
    exit_code: int,
    error: str = "",
    killed: bool = False,
    agent_lost: bool = False,
    fatal: bool = False,
) -> Append:
    """The allocation's one exit, decided by the scheduler (a lost agent, a
    finished gang); the msg id is the one an agent would use, so the first
    writer wins."""
    trial = request.requested.trial
    event = events_pb2.AllocationExited(
        allocation_id=request.allocation_id,
        task_id=request.requested.task_id,
        trial_id=trial.trial_id,
        experiment_id=trial.experiment_id,
        agent_id=agent_id,
        exit_code=exit_code,
        error=error,
        killed=killed,
        agent_lost=agent_lost,
        fatal=fatal,
    )
    return Append(
        aggregate("allocation", request.allocation_id), event, f"allocation-exited-{request.allocation_id}"
    )


def gang_decisions(request: Request) -> list[Append]:
    parts = request.part_exits
    failed = next((part.exited for part in parts if part.failed), None)
    exited_agents = {part.exited.agent_id for part in parts}
    allocation = aggregate("allocation", request.allocation_id)
    if all(agent_id in exited_agents for agent_id, _ in request.placements):
        chief = request.placements[0][0]
        exited = allocation_exited(
            request,
            failed.agent_id if failed else chief,
            exit_code=failed.exit_code if failed else 0,
            error=failed.error if failed else "",
            fatal=failed.fatal if failed else False,
            killed=failed is None and all(part.exited.killed for part in parts),
        )
        return [exited]
    if failed is None or request.kill_requested:
        return []
    code = f"exited with code {failed.exit_code}" if not failed.killed else "was killed"
    kill = events_pb2.AllocationKillRequested(
        allocation_id=request.allocation_id,
        task_id=request.requested.task_id,
        trial_id=request.requested.trial.trial_id,
        agent_id=failed.agent_id,
        reason=f"worker on agent {failed.agent_id} {code}" + (f": {failed.error}" if failed.error else ""),
    )
    return [Append(allocation, kill, f"allocation-kill-gang-{request.allocation_id}")]
