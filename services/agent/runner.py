"""The agent's side effects: starting, watching and killing trial processes.

`Runner.on_state` is the Shell's hook: after each fold it starts a process for
every allocation of this agent that has none yet and signals those asked to
stop. Each process is watched by its own task, which appends
AllocationStarted and AllocationExited itself (their msg ids make a repeat
harmless); the exit folds back into the core's state through the log.
"""

import asyncio
import contextlib
import json
import os
import signal
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from determined.common.context import ContextError, extract_context
from determined.proto import events_pb2
from services.agent.core import AgentAllocation, AgentState, allocation_exited, allocation_started
from services.agent.launch import STARTUP_HOOK, AgentError, AgentIdentity, entrypoint_argv, trial_environment
from services.agent.logs import MAX_LINE_BYTES, LogShipper
from services.common.envelope import Append
from services.common.eventstore import EventStore, NotFoundError
from services.common.tokens import mint_allocation_token

SETUP_FAILED_EXIT_CODE = 1

log = structlog.get_logger()


@dataclass
class Running:
    """One allocation's process (None until started) and its watcher."""

    allocation: AgentAllocation
    task: asyncio.Task[None] | None = None
    process: asyncio.subprocess.Process | None = None
    kill_requested: bool = False
    killer: asyncio.Task[None] | None = None

    @property
    def assigned(self) -> events_pb2.AllocationAssigned:
        return self.allocation.assigned


@dataclass
class Runner:
    store: EventStore
    identity: AgentIdentity
    work_dir: Path
    cluster_secret: str
    slot_type: str
    actor: str
    kill_grace_s: float = 10.0
    table: dict[str, Running] = field(default_factory=dict)

    async def on_state(self, state: AgentState) -> list[Append]:
        for allocation_id, allocation in state.allocations.items():
            if allocation.orphaned:
                continue
            running = self.table.get(allocation_id)
            if running is None:
                running = self.table[allocation_id] = Running(allocation)
                running.task = asyncio.create_task(self._run(running), name=f"allocation-{allocation_id}")
            if allocation.kill_requested and not running.kill_requested:
                self._kill(running)
        for allocation_id in [a for a in self.table if a not in state.allocations]:
            del self.table[allocation_id]  # its exit is folded: the process is gone
        return []

    async def stop(self) -> None:
        """Kills every process (the agent is going away); their allocations are
        closed as "agent restarted" when the agent starts again."""
        for running in self.table.values():
            if running.process is not None and running.process.returncode is None:
                _signal_group(running.process.pid, signal.SIGKILL)
            if running.task is not None:
                running.task.cancel()

    # -- one allocation -----------------------------------------------------------

    async def _run(self, running: Running) -> None:
        assigned = running.assigned
        shipper = LogShipper(
            self.store.publish_logs,
            trial_id=assigned.trial_id,
            allocation_id=assigned.allocation_id,
            agent_id=self.identity.agent_id,
        )
        try:
            folder, argv = await self._prepare(assigned)
            if running.kill_requested:  # asked before it could start
                await shipper.close()
                await self._answer(running, allocation_exited(assigned, -int(signal.SIGTERM), killed=True))
                return
            running.process = await self._spawn(running, folder, argv)
        except (AgentError, ContextError, NotFoundError, OSError) as error:
            await self._fail(running, shipper, str(error))
            return
        exit_code = await self._watch(running, running.process, shipper)
        log.info(
            "allocation_exited",
            allocation_id=assigned.allocation_id,
            exit_code=exit_code,
            killed=running.kill_requested,
        )
        await self._answer(running, allocation_exited(assigned, exit_code, killed=running.kill_requested))

    async def _fail(self, running: Running, shipper: LogShipper, error: str) -> None:
        """The allocation could not start: the user reads why in the trial's logs."""
        assigned = running.assigned
        log.warning("allocation_setup_failed", allocation_id=assigned.allocation_id, error=error)
        shipper.add("stderr", f"determined agent: {error}")
        await shipper.close()
        await self._answer(running, allocation_exited(assigned, SETUP_FAILED_EXIT_CODE, error=error))

    async def _prepare(self, assigned: events_pb2.AllocationAssigned) -> tuple[Path, list[str]]:
        """Extracts the context into the allocation's folder; returns it and the
        command to run there."""
        folder = self.work_dir / assigned.allocation_id
        folder.mkdir(parents=True, exist_ok=True)
        if assigned.context_hash:
            data = await self.store.get_context(assigned.context_hash)
            await asyncio.to_thread(extract_context, data, folder)
        config = json.loads(assigned.config_json or "{}")
        argv = entrypoint_argv(config, startup_hook=(folder / STARTUP_HOOK).is_file())
        return folder, argv

    async def _spawn(self, running: Running, folder: Path, argv: list[str]) -> asyncio.subprocess.Process:
        assigned = running.assigned
        token = mint_allocation_token(self.cluster_secret, assigned.trial_id, assigned.allocation_id)
        env = trial_environment(
            assigned, self.identity, session_token=token, slot_type=self.slot_type, inherited=os.environ
        )
        process = await asyncio.create_subprocess_exec(
            *argv,
            cwd=folder,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,  # its own process group, killed as one
            limit=MAX_LINE_BYTES,
        )
        log.info("allocation_started", allocation_id=assigned.allocation_id, pid=process.pid, argv=argv)
        await self._answer(running, allocation_started(assigned, process.pid))
        return process

    async def _watch(self, running: Running, process: asyncio.subprocess.Process, shipper: LogShipper) -> int:
        """Ships the process's output until it exits; returns its exit code."""
        if running.kill_requested:  # asked while it was starting
            self._kill(running)
        shipper.start()
        assert process.stdout is not None and process.stderr is not None
        await asyncio.gather(
            shipper.follow(process.stdout, "stdout"), shipper.follow(process.stderr, "stderr")
        )
        exit_code = await process.wait()
        await shipper.close()
        return exit_code

    def _kill(self, running: Running) -> None:
        running.kill_requested = True
        if running.process is not None and running.killer is None:
            running.killer = asyncio.create_task(self._terminate(running.process))

    async def _terminate(self, process: asyncio.subprocess.Process) -> None:
        """SIGTERM to the process group; SIGKILL after the grace period."""
        _signal_group(process.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.shield(process.wait()), self.kill_grace_s)
        except TimeoutError:
            _signal_group(process.pid, signal.SIGKILL)

    async def _answer(self, running: Running, append: Append) -> None:
        """Appends an event about an allocation, as an answer to its assignment."""
        await self.store.append(running.allocation.answer(append), actor=self.actor)


def _signal_group(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signum)
