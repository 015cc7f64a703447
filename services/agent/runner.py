"""The agent's side effects: starting, watching and killing trial processes.

`Runner.on_state` is the Shell's hook: after each fold it starts a process for
every allocation of this agent that has none yet, kills those asked to die,
and gives those asked to stop their grace period (the experiment config's
`preemption_timeout`, else the agent's `stop_grace_s`): a process still
running after it is killed. Each process is watched by its own task, which
appends AllocationStarted and AllocationExited itself (their msg ids make a
repeat harmless); the exit folds back into the core's state through the log.

With a `ForkServer` (opt-in, DET_AGENT_FORK_SERVER), an allocation whose
entrypoint is a plain `python3 script.py ...` (`forkable_argv`) runs in a
child forked from a warm helper (`determined.exec.forkserver`) instead of a
fresh interpreter; `ForkedProcess` gives it the surface of an
asyncio.subprocess.Process, so watching and killing it are the same.
"""

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import struct
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import structlog

from determined.common.context import ContextError, extract_context
from determined.proto import events_pb2
from services.agent.core import AgentAllocation, AgentState, allocation_exited, allocation_started
from services.agent.launch import (
    STARTUP_HOOK,
    AgentError,
    AgentIdentity,
    entrypoint_argv,
    forkable_argv,
    trial_environment,
)
from services.agent.logs import MAX_LINE_BYTES, LogShipper
from services.common.config import experiment_config
from services.common.envelope import Append
from services.common.eventstore import EventStore, NotFoundError
from services.common.processes import process_alive
from services.common.tokens import mint_allocation_token

SETUP_FAILED_EXIT_CODE = 1
# How long the fork server may take to preload its modules (torch: seconds).
FORK_SERVER_START_TIMEOUT_S = 300.0
FORK_REQUEST_TIMEOUT_S = 30.0

log = structlog.get_logger()


class TrialProcess(Protocol):
    """What the runner uses of a trial's process."""

    @property
    def pid(self) -> int: ...
    @property
    def returncode(self) -> int | None: ...

    stdout: asyncio.StreamReader | None
    stderr: asyncio.StreamReader | None

    async def wait(self) -> int: ...


class ForkServerUnavailable(AgentError):
    """The fork server could not be started or reached: the trial runs as a new process."""


class ForkedProcess:
    """A child of the fork server, seen as an asyncio.subprocess.Process: its
    pipes, and its exit status as the fork server reports it."""

    def __init__(
        self, pid: int, stdout: asyncio.StreamReader, stderr: asyncio.StreamReader, status: socket.socket
    ) -> None:
        self.pid = pid
        self.stdout: asyncio.StreamReader | None = stdout
        self.stderr: asyncio.StreamReader | None = stderr
        self.returncode: int | None = None
        self._ended = asyncio.create_task(self._follow(status), name=f"forked-{pid}")

    async def wait(self) -> int:
        await asyncio.shield(self._ended)
        assert self.returncode is not None
        return self.returncode

    async def _follow(self, status: socket.socket) -> None:
        line = b""
        try:
            reader, writer = await asyncio.open_unix_connection(sock=status)
            try:
                line = await reader.readline()
            finally:
                writer.close()
        except OSError:
            pass
        try:
            self.returncode = int(json.loads(line)["exit"])
            return
        except (ValueError, KeyError, TypeError):
            pass
        # The fork server died: the child, now init's, is watched until it is gone.
        log.warning("fork_server_lost_child", pid=self.pid)
        while process_alive(self.pid):
            await asyncio.sleep(0.2)
        self.returncode = SETUP_FAILED_EXIT_CODE


@dataclass
class ForkServer:
    """The agent's fork server, started on first use and again if it died."""

    preload: tuple[str, ...] = ()
    process: asyncio.subprocess.Process | None = None
    folder: Path | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def spawn(self, argv: list[str], cwd: Path, env: Mapping[str, str]) -> ForkedProcess:
        """Forks a child running `python3 argv...` in cwd with exactly env.
        ForkServerUnavailable: nothing was started."""
        path = await self._ensure_started()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            request = json.dumps({"argv": argv, "cwd": str(cwd), "env": dict(env)}).encode()
            # The thread closes the write ends: a cancelled wait must not close them under it.
            status, pid = await asyncio.to_thread(_fork_request, path, request, out_w, err_w)
        except BaseException:
            os.close(out_r)
            os.close(err_r)
            raise
        return ForkedProcess(pid, await _pipe_reader(out_r), await _pipe_reader(err_r), status)

    async def close(self) -> None:
        if self.process is not None and self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
            await self.process.wait()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)

    async def _ensure_started(self) -> Path:
        async with self.lock:
            if self.folder is None:  # private (0700): whoever connects runs code as the agent
                self.folder = Path(tempfile.mkdtemp(prefix="det-forkserver-"))
            path = self.folder / "sock"
            if self.process is not None and self.process.returncode is None:
                return path
            if self.process is not None:
                log.warning("fork_server_died", returncode=self.process.returncode)
            path.unlink(missing_ok=True)
            # The agent's environment less its DET_ settings: the cluster
            # secret must not be in the memory its children inherit.
            env = {k: v for k, v in os.environ.items() if not k.startswith("DET_")}
            try:
                self.process = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "determined.exec.forkserver", str(path), ",".join(self.preload),
                    cwd=self.folder, env=env, stdin=asyncio.subprocess.DEVNULL, start_new_session=True,
                )
            except OSError as error:
                raise ForkServerUnavailable(f"cannot start the fork server: {error}") from None
            loop = asyncio.get_running_loop()
            deadline = loop.time() + FORK_SERVER_START_TIMEOUT_S
            while not path.exists():
                if self.process.returncode is not None or loop.time() > deadline:
                    raise ForkServerUnavailable("the fork server did not start")
                await asyncio.sleep(0.01)
            log.info("fork_server_started", pid=self.process.pid, preload=self.preload)
            return path


def _fork_request(path: Path, request: bytes, out_w: int, err_w: int) -> tuple[socket.socket, int]:
    """Sends one request (blocking: run in a thread); returns the connection
    the exit status will come on, and the child's pid. Closes out_w and err_w."""
    try:
        sock = _send_request(path, request, out_w, err_w)
    finally:
        os.close(out_w)
        os.close(err_w)
    try:
        line = b""
        while not line.endswith(b"\n"):  # byte by byte: what follows is the exit status
            byte = sock.recv(1)
            if not byte:
                raise AgentError("the fork server closed the connection")
            line += byte
        answer = json.loads(line)
        if "pid" not in answer:
            raise AgentError(f"the fork server could not start the trial: {answer.get('error')}")
        sock.setblocking(False)
        return sock, int(answer["pid"])
    except BaseException:
        sock.close()
        raise


def _send_request(path: Path, request: bytes, out_w: int, err_w: int) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(FORK_REQUEST_TIMEOUT_S)
        try:
            sock.connect(str(path))
        except OSError as error:
            raise ForkServerUnavailable(f"cannot reach the fork server: {error}") from None
        data = struct.pack(">Q", len(request)) + request
        sent = socket.send_fds(sock, [data], [out_w, err_w])
        sock.sendall(data[sent:])
        return sock
    except BaseException:
        sock.close()
        raise


async def _pipe_reader(fd: int) -> asyncio.StreamReader:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_LINE_BYTES, loop=loop)
    pipe = os.fdopen(fd, "rb", 0)  # closed by the transport at EOF
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader, loop=loop), pipe)
    return reader
@dataclass
class Running:
    """One allocation's process (None until started) and its watcher."""

    allocation: AgentAllocation
    task: asyncio.Task[None] | None = None
    process: TrialProcess | None = None
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
    # Forks plain `python3 script.py` trials from a warm process (opt-in).
    fork_server: ForkServer | None = None
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
        if self.fork_server is not None:
            await self.fork_server.close()

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
            folder, argv, script = await self._prepare(running.launch, allocation.allocation_id)
            if running.kill_requested:  # asked before it could start
                await shipper.close()
                await self._answer(running, allocation_exited(allocation, -int(signal.SIGTERM), killed=True))
                return
            running.process = await self._spawn(running, folder, argv, script)
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

    async def _prepare(
        self, launch: events_pb2.TrialLaunch, allocation_id: str
    ) -> tuple[Path, list[str], list[str] | None]:
        """Extracts the context into the allocation's folder; returns it, the
        command to run there and, when the fork server may run it instead,
        the script and its arguments."""
        folder = self.work_dir / allocation_id
        folder.mkdir(parents=True, exist_ok=True)
        if launch.context_hash:
            data = await self.store.get_context(launch.context_hash)
            await asyncio.to_thread(extract_context, data, folder)
        config = json.loads(launch.config_json or "{}")
        startup_hook = (folder / STARTUP_HOOK).is_file()
        argv = entrypoint_argv(config, startup_hook=startup_hook)
        script = None
        if self.fork_server is not None:
            script = forkable_argv(config, startup_hook=startup_hook, slot_type=self.slot_type)
        return folder, argv, script

    async def _spawn(
        self, running: Running, folder: Path, argv: list[str], script: list[str] | None
    ) -> TrialProcess:
        allocation = running.allocation
        token = mint_allocation_token(self.cluster_secret, running.launch.trial_id, allocation.allocation_id)
        env = trial_environment(
            allocation, self.identity, session_token=token, slot_type=self.slot_type, inherited=os.environ
        )
        process: TrialProcess | None = None
        if script is not None and self.fork_server is not None:
            try:
                process = await self.fork_server.spawn(script, folder, env)
            except ForkServerUnavailable as error:
                log.warning("fork_server_unavailable", allocation_id=allocation.allocation_id, error=str(error))
        if process is None:
            process = await self._exec(folder, argv, env)
        log.info(
            "allocation_started",
            allocation_id=allocation.allocation_id,
            pid=process.pid,
            argv=argv,
            forked=isinstance(process, ForkedProcess),
        )
        await self._answer(running, allocation_started(allocation, process.pid))
        return process

    async def _exec(self, folder: Path, argv: list[str], env: dict[str, str]) -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(
            *argv,
            cwd=folder,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,  # its own process group, killed as one
            limit=MAX_LINE_BYTES,
        )

    async def _watch(self, running: Running, process: TrialProcess, shipper: LogShipper) -> int:
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

    async def _terminate(self, process: TrialProcess) -> None:
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
