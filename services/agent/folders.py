"""What becomes of allocation folders, and of the process groups that earlier
runs of the agent left: pure decisions over what `workdir.py` read in the
agent's work dir (which does what is decided).

Every allocation has a folder `<work dir>/<allocation id>`: the context its
process runs in, the record of its process group (`process.json`, written by
the process itself before it runs anything) and, once it ended badly, a note
of that end (`exit.json`).

- A folder is removed when its allocation ends well (exit 0, not killed, no
  error). One that ended badly (a non-zero exit, killed, its set-up failed,
  lost with the agent) is kept for debugging until `keep_failed_s` after
  its end, and removed by the sweep at start-up or the periodic one after.
- The folder of an allocation this run of the agent is running is never
  touched, nor one whose records name another agent.
- At start-up this run of the agent has started nothing, so every process
  group recorded by this agent was started by an earlier run: whether the
  log still has its allocation open or not, nothing can watch it any more
  (its pipes went with that run), so it is killed (`groups_to_kill`; the
  reaper, `reaper.py`, decides the same when that run ends). The agent does
  that before it registers, so before the core closes the allocations left
  open as "agent restarted" (`core.py`, from the log alone) and their trials
  run again: never two copies at once. A folder an earlier run left without
  an end ended with that run: it is kept as a failed one from now on.
"""

from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class AllocationFolder:
    allocation_id: str
    # The agent its process record or its exit note names; None: it has
    # neither (its process never started, and it has not ended).
    agent_id: str | None = None
    # Whether process.json names a process group (of `agent_id`).
    recorded: bool = False
    # When it ended badly (unix seconds, from exit.json); None: no such note.
    failed_at: float | None = None


@dataclass(frozen=True)
class StartUpPlan:
    # Allocations whose recorded process group is killed (if it still runs).
    kill: tuple[str, ...]
    # Folders an earlier run left without an end: noted as ended badly, now.
    lost: tuple[str, ...]
    # Folders removed (after the kills).
    remove: tuple[str, ...]


def ended_well(exit_code: int, *, killed: bool, error: str) -> bool:
    """Whether an allocation's folder goes when it ends (else it is kept a while)."""
    return exit_code == 0 and not killed and not error


def groups_to_kill(agent_id: str, folders: Sequence[AllocationFolder]) -> tuple[str, ...]:
    """The allocations whose recorded process groups are this agent's: when
    no run of the agent is watching them, they go (those still running)."""
    return tuple(
        folder.allocation_id for folder in folders if folder.recorded and folder.agent_id == agent_id
    )


def plan_start_up(
    agent_id: str,
    folders: Sequence[AllocationFolder],
    *,
    now: float,
    keep_failed_s: float,
    keep: Collection[str] = (),
) -> StartUpPlan:
    """What to do with the work dir before this run of the agent starts
    anything. `keep`: allocations whose containers an earlier run left
    running (they may be reattached): their folders are left as they are."""
    mine = [
        folder
        for folder in folders
        if folder.agent_id in (None, agent_id) and folder.allocation_id not in keep
    ]
    kill = groups_to_kill(agent_id, folders)
    ended = [folder if folder.failed_at is not None else replace(folder, failed_at=now) for folder in mine]
    remove = folders_to_remove(agent_id, ended, running=(), now=now, keep_failed_s=keep_failed_s)
    lost = tuple(
        folder.allocation_id
        for folder in mine
        if folder.failed_at is None and folder.allocation_id not in remove
    )
    return StartUpPlan(kill, lost, remove)


def folders_to_remove(
    agent_id: str,
    folders: Sequence[AllocationFolder],
    *,
    running: Collection[str],
    now: float,
    keep_failed_s: float,
) -> tuple[str, ...]:
    """The folders of this agent's allocations that ended badly at least
    `keep_failed_s` ago; never one of an allocation in `running`."""
    return tuple(
        folder.allocation_id
        for folder in folders
        if folder.agent_id in (None, agent_id)
        and folder.allocation_id not in running
        and folder.failed_at is not None
        and now - folder.failed_at >= keep_failed_s
    )
