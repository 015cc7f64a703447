"""The agent's side effects: starting, watching and killing trial processes.

`Runner.on_state` is the Shell's hook: after each fold it starts a process for
every allocation of this agent that has none yet, kills those asked to die,
and gives those asked to stop their grace period (the experiment config's
`preemption_timeout`, else the agent's `stop_grace_s`): a process still
running after it is killed. Each process is watched by its own task, which
appends AllocationStarted and AllocationExited itself (their msg ids make a
repeat harmless); the exit folds back into the core's state through the log.
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
from services.common.config import experiment_config
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
    stop_timer: asyncio.Task[None] | None = None

    @property
    def launch(self) -> events_pb2.TrialLaunch:
        return self.allocation.launch


@dataclass
class Runner:
    store: EventStore
    identity: AgentIdentity
    work_dir: Path
    cluster_secret: str
    slot_type: str
    actor: str
    kill_grace_s: float = 10.0
    stop_grace_s: float = 3600.0
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
            elif allocation.stop_requested and running.stop_timer is None:
                running.stop_timer = asyncio.create_task(self._kill_after_grace(running))
        for allocation_id in [a for a in self.table if a not in state.allocations]:
            del self.table[allocation_id]  # its exit is folded: the process is gone
        return []

    async def stop(self) -> None:
        """Kills every process (the agent is going away); their allocations are
        closed as "agent restarted" when the agent starts again."""
        for running in self.table.values():
            if running.process is not None and running.process.returncode is None:
                _signal_group(running.process.pid, signal.SIGKILL)
            for task in (running.task, running.stop_timer):
                if task is not None:
                    task.cancel()

    # -- one allocation -----------------------------------------------------------

    async def _run(self, running: Running) -> None:
        allocation = running.allocation
        shipper = LogShipper(
            self.store.publish_logs,
            trial_id=running.launch.trial_id,
            allocation_id=allocation.allocation_id,
            agent_id=self.identity.agent_id,
        )
        try:
            folder, argv = await self._prepare(running.launch, allocation.allocation_id)
            if running.kill_requested:  # asked before it could start
                await shipper.close()
                await self._answer(running, allocation_exited(allocation, -int(signal.SIGTERM), killed=True))
                return
            running.process = await self._spawn(running, folder, argv)
        except (AgentError, ContextError, NotFoundError, OSError) as error:
            await self._fail(running, shipper, str(error))
            return
        exit_code = await self._watch(running, running.process, shipper)
        log.info(
            "allocation_exited",
            allocation_id=allocation.allocation_id,
            exit_code=exit_code,
            killed=running.kill_requested,
        )
        await self._answer(running, allocation_exited(allocation, exit_code, killed=running.kill_requested))

    async def _fail(self, running: Running, shipper: LogShipper, error: str) -> None:
        """The allocation could not start: the user reads why in the trial's logs."""
        allocation = running.allocation
        log.warning("allocation_setup_failed", allocation_id=allocation.allocation_id, error=error)
        shipper.add("stderr", f"determined agent: {error}")
        await shipper.close()
        await self._answer(running, allocation_exited(allocation, SETUP_FAILED_EXIT_CODE, error=error))

    async def _prepare(self, launch: events_pb2.TrialLaunch, allocation_id: str) -> tuple[Path, list[str]]:
        """Extracts the context into the allocation's folder; returns it and the
        command to run there."""
        folder = self.work_dir / allocation_id
        folder.mkdir(parents=True, exist_ok=True)
        if launch.context_hash:
            data = await self.store.get_context(launch.context_hash)
            await asyncio.to_thread(extract_context, data, folder)
        config = json.loads(launch.config_json or "{}")
        argv = entrypoint_argv(config, startup_hook=(folder / STARTUP_HOOK).is_file())
        return folder, argv

    async def _spawn(self, running: Running, folder: Path, argv: list[str]) -> asyncio.subprocess.Process:
        allocation = running.allocation
        token = mint_allocation_token(self.cluster_secret, running.launch.trial_id, allocation.allocation_id)
        env = trial_environment(
            allocation, self.identity, session_token=token, slot_type=self.slot_type, inherited=os.environ
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
        log.info("allocation_started", allocation_id=allocation.allocation_id, pid=process.pid, argv=argv)
        await self._answer(running, allocation_started(allocation, process.pid))
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

    async def _kill_after_grace(self, running: Running) -> None:
        """A stop request's deadline: the process had its grace period to
        checkpoint and exit; past it, it is killed (what it reported stays)."""
        timeout = experiment_config(running.launch.config_json).preemption_timeout
        await asyncio.sleep(self.stop_grace_s if timeout is None else timeout)
        if running.process is None or running.process.returncode is None:
            log.info("allocation_stop_grace_expired", allocation_id=running.allocation.allocation_id)
            self._kill(running)

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
