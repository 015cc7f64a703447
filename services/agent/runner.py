"""The agent's side effects: starting, watching and killing trial processes.

`Runner.on_state` is the Shell's hook: after each fold it starts a process for
every allocation of this agent that has none yet, kills those asked to die,
and gives those asked to stop their grace period (the experiment config's
`preemption_timeout`, else the agent's `stop_grace_s`): a process still
running after it is killed, unless the stop is withdrawn first. Each process is watched by its own task, which
appends AllocationStarted and AllocationExited itself (their msg ids make a
repeat harmless); the exit folds back into the core's state through the log.
Those appends, and the logs (`logs.py`), wait out a NATS outage: the trial
keeps running meanwhile. The end of this agent's part of an allocation that
spans several agents is appended as AllocationResourcesExited instead
(`core.part_ended`): the scheduler closes the allocation.

Fencing: an allocation closed in the log by another writer (the scheduler,
after another agent of its gang was lost), or any allocation of a run whose
registration was declared lost, has its process group killed at once
(SIGKILL), and nothing more is appended about it. The heartbeats of the
current registration (`services.common.heartbeats`) go on beside.

Who a trial runs as (`trial_user.py`): an agent that runs as root with a
trial user runs every trial process, and its fork server, as that user. Each
allocation's folder `<work dir>/<allocation id>/` is the agent's (0711: the
trial may pass, not list): its process record, its exit note, its log spill
file, its config (`launch.CONFIG_FILE`, the trial's to read) and the file where
the trial says why a restart cannot help (`launch.FATAL_ERROR_FILE`) are there,
where the trial cannot replace them; the trial runs in `trial/` under it (TRIAL_FOLDER, the
trial user's, 0700), which holds the extracted context and is its HOME.

No process outlives the agent unnoticed: each runs in its own session (a
process group killed as one), asks the kernel to SIGKILL it when the agent
dies (PR_SET_PDEATHSIG, armed once it runs as the trial user: a change of
user clears it), and has its process record
(`<work dir>/<allocation id>/process.json`) before it runs anything (a
forked one: as the fork server answers, with the start time the fork server
read while the pid could not be reused; until then it dies with the fork
server). What it
started in its group ends with it. When the agent starts, it kills what an
earlier run left and sweeps old folders (`recover`, `folders.py`); it starts
nothing until its own registration is folded (`AgentState.registered`).

With `containers` (DET_AGENT_RUNTIME=docker, `containers/`), each allocation
runs as a Docker container instead: the same folder (mounted inside), the
same environment, watching, log shipping, stop and fencing (signals go to the
container), its exit appended the same way; the container is removed once
its output is shipped. Containers do not die with the agent: a restarted
agent reattaches those of allocations still open in the log (`recover`
lists them, the core keeps their allocations as this run's, and their output
is followed again from the last line shipped) and removes the rest.

A notebook's, TensorBoard's, command's or shell's allocation (a TaskLaunch
spec) runs the same way, as a process or a container, with what
`task_launch.py` says: its server's port is chosen as it starts, its output
goes to its task's log subject, AllocationReady is appended once the server
answers (`readiness.py`), and a notebook with an idle_timeout is watched and
killed once idle (`idle.py`). A stop (a disabled agent) kills a task at once:
it has nothing to save.

With a `ForkServer` (DET_AGENT_FORK_SERVER, on unless set to 0), an allocation whose
entrypoint is a plain `python3 script.py ...` (`forkable_argv`) runs in a
child forked from a warm helper (`determined.exec.forkserver`) instead of a
fresh interpreter; `ForkedProcess` gives it the surface of an
asyncio.subprocess.Process, so watching and killing it are the same.
"""

import asyncio
import contextlib
import functools
import json
import os
import shutil
import signal
import socket
import stat
import struct
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from subprocess import SubprocessError
from typing import Any, Protocol

import structlog

from determined.common.context import ContextError, extract_context
from determined.exec import private_tmp
from determined.proto import events_pb2
from services.agent import workdir
from services.agent.containers.launcher import Containers
from services.agent.containers.runtime import ContainerProcess
from services.agent.containers.spec import ContainerConfigError
from services.agent.context_fetch import fetch_context
from services.agent.core import (
    AgentAllocation,
    AgentState,
    allocation_ready,
    allocation_started,
    idle_kill_requested,
    part_ended,
)
from services.agent.folders import ended_well
from services.agent.idle import idle_settings, watch_idle
from services.agent.launch import (
    CONFIG_FILE,
    FATAL_ERROR_FILE,
    MASTER_CERT_FILE,
    STARTUP_HOOK,
    TRIAL_FOLDER,
    AgentError,
    AgentIdentity,
    entrypoint_argv,
    forkable_argv,
    passed_on,
    trial_environment,
)
from services.agent.logs import MAX_LINE_BYTES, SPILL_FILE, LogShipper, Publish, read_progress
from services.agent.logs import MEMORY_BYTES as LOG_MEMORY_BYTES
from services.agent.notices import runtime_notices
from services.agent.private_tmp import TrialTmp
from services.agent.readiness import wait_until_ready
from services.agent.task_launch import (
    HTTP_SERVERS,
    NOTEBOOK,
    free_port,
    has_server,
    plain_task_id,
    proxy_address,
    proxy_prefix,
    read_storages,
    task_argv,
    task_environment,
    task_files,
    working_dir,
)
from services.common.config import experiment_config
from services.common.envelope import Append
from services.common.eventlog import EventStoreError
from services.common.eventstore import EventStore
from services.common.os_users import OsUser
from services.common.processes import (
    ProcessRecord,
    allocation_preexec,
    dying_with_parent,
    process_alive,
    write_process_record,
)
from services.common.tokens import mint_allocation_token, task_proxy_token

SETUP_FAILED_EXIT_CODE = 1
# What the agent keeps of a trial's FATAL_ERROR_FILE: a reason, not a log.
MAX_FATAL_ERROR_BYTES = 4096
# How long the fork server may take to preload its modules (torch: seconds).
FORK_SERVER_START_TIMEOUT_S = 300.0
FORK_REQUEST_TIMEOUT_S = 30.0
# After the process exited, how long what it started may keep its output open.
OUTPUT_DRAIN_S = 1.0
EXIT_POLL_S = 0.1
SWEEP_MAX_INTERVAL_S = 600.0
REAPER_EXIT_TIMEOUT_S = 10.0
# In a container's allocation folder: what its shipper shipped (`logs.ShippedProgress`).
LOGS_SHIPPED_FILE = "logs-shipped.json"


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
    pipes, and its exit status as the fork server reports it (and when it
    started, for its process record)."""

    def __init__(
        self,
        pid: int,
        start_ticks: int,
        stdout: asyncio.StreamReader,
        stderr: asyncio.StreamReader,
        status: socket.socket,
    ) -> None:
        self.pid = pid
        self.start_ticks = start_ticks
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
        # The fork server died, and the kernel kills its children with it:
        # the child is watched until it is gone.
        log.warning("fork_server_lost_child", pid=self.pid)
        while process_alive(self.pid):
            await asyncio.sleep(0.2)
        self.returncode = SETUP_FAILED_EXIT_CODE


@dataclass
class ForkServer:
    """The agent's fork server, started on first use and again if it died. It
    runs as the trial user (when there is one), with the trials' Python."""

    preload: tuple[str, ...] = ()
    user: OsUser | None = None
    python: str = sys.executable
    process: asyncio.subprocess.Process | None = None
    folder: Path | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def spawn(
        self,
        argv: list[str],
        cwd: Path,
        env: Mapping[str, str],
        record: Mapping[str, str] | None = None,
        tmp: Mapping[str, object] | None = None,
    ) -> ForkedProcess:
        """Forks a child running `python3 argv...` in cwd with exactly env;
        with `record` ({"path", "agent_id", "allocation_id"}), the child
        writes its process record there before it runs anything (as the fork
        server's user: the runner, whose allocation folders a trial user may
        not write, writes its records itself); with `tmp` (`TrialTmp.request`),
        its own /tmp. ForkServerUnavailable: nothing was started."""
        path = await self._ensure_started()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            message: dict[str, object] = {"argv": argv, "cwd": str(cwd), "env": dict(env)}
            if record is not None:
                message["record"] = dict(record)
            if tmp is not None:
                message["tmp"] = dict(tmp)
            request = json.dumps(message).encode()
            # The thread closes the write ends: a cancelled wait must not close them under it.
            status, pid, ticks = await asyncio.to_thread(_fork_request, path, request, out_w, err_w)
        except BaseException:
            os.close(out_r)
            os.close(err_r)
            raise
        return ForkedProcess(pid, ticks, await _pipe_reader(out_r), await _pipe_reader(err_r), status)

    async def close(self) -> None:
        if self.process is not None and self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
            await self.process.wait()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)

    async def _ensure_started(self) -> Path:
        async with self.lock:
            if self.folder is None:  # private (0700): whoever connects runs code as its user
                self.folder = Path(tempfile.mkdtemp(prefix="det-forkserver-"))
                if self.user is not None:
                    os.chown(self.folder, self.user.uid, self.user.gid)
            path = self.folder / "sock"
            if self.process is not None and self.process.returncode is None:
                return path
            if self.process is not None:
                log.warning("fork_server_died", returncode=self.process.returncode)
            path.unlink(missing_ok=True)
            # What a trial gets of the agent's environment: the cluster's
            # secrets must not be in the memory its children inherit.
            env = passed_on(os.environ, own_user=self.user is None)
            env["PATH"] = os.environ.get("PATH", "")
            try:
                self.process = await asyncio.create_subprocess_exec(
                    self.python,
                    "-m",
                    "determined.exec.forkserver",
                    str(path),
                    ",".join(self.preload),
                    cwd=self.folder,
                    env=env,
                    stdin=asyncio.subprocess.DEVNULL,
                    start_new_session=True,
                    # Its user first: a change of user clears the parent-death signal.
                    # Its children die with it, as it dies with the agent.
                    preexec_fn=_then(as_user(self.user), dying_with_parent(os.getpid())),
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


def _fork_request(path: Path, request: bytes, out_w: int, err_w: int) -> tuple[socket.socket, int, int]:
    """Sends one request (blocking: run in a thread); returns the connection
    the exit status will come on, the child's pid and when it started. Closes
    out_w and err_w."""
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
        return sock, int(answer["pid"]), int(answer["start_ticks"])
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
        if sent < len(data):  # sendall(b"") would still send: EPIPE once a quick child's status came and went
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
    shipper: LogShipper | None = None
    kill_requested: bool = False
    # Closed in the log, or this run was declared lost: killed at once, its end not appended.
    fenced: bool = False
    killer: asyncio.Task[None] | None = None
    stop_timer: asyncio.Task[None] | None = None
    # A task's server: its port, and what watches it (readiness, idleness) while it runs.
    port: int = 0
    watchers: list[asyncio.Task[None]] = field(default_factory=list)

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
    # How long the folder of an allocation that ended badly is kept.
    keep_failed_s: float = 24 * 3600.0
    # How much of an allocation's output waits in memory while NATS is
    # unreachable, before the rest waits in a file in its folder.
    log_memory_bytes: int = LOG_MEMORY_BYTES
    # Forks plain `python3 script.py` trials from a warm process.
    fork_server: ForkServer | None = None
    # Who trials run as (None: the agent's own user).
    trial_user: OsUser | None = None
    # Runs allocations as Docker containers (None: as processes).
    containers: Containers | None = None
    # Containers an earlier run left, by allocation id, until this run's
    # registration is folded: those of open allocations are reattached.
    left_running: dict[str, Any] = field(default_factory=dict)
    table: dict[str, Running] = field(default_factory=dict)
    # Kills what this run started once it is gone (`reaper.py`).
    reaper: asyncio.subprocess.Process | None = None
    # Sends the heartbeats of a registration (its event id) until cancelled.
    heartbeats: Callable[[str], Coroutine[Any, Any, None]] | None = None
    # The registration whose heartbeats are being sent, and their task.
    beating: tuple[str, "asyncio.Task[None]"] | None = None

    async def recover(self) -> None:
        """Before this run of the agent starts anything (and registers): kills
        what earlier runs left running, sweeps their folders (`folders.py`),
        and finds the containers they left (kept, with their folders, until
        the log says whose allocations are still open)."""
        if self.containers is not None:
            self.left_running = await self.containers.left_running(self.identity.agent_id, self.work_dir)
            await self.containers.prepare()
        await asyncio.to_thread(
            workdir.recover,
            self.work_dir,
            self.identity.agent_id,
            now=time.time(),
            keep_failed_s=self.keep_failed_s,
            keep=set(self.left_running),
        )

    async def start_reaper(self) -> None:
        """Starts the process that kills this run's process groups when it
        ends (its stdin is a pipe only this process holds)."""
        self.reaper = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "services.agent.reaper",
            str(self.work_dir),
            self.identity.agent_id,
            stdin=asyncio.subprocess.PIPE,
            start_new_session=True,
        )

    async def sweep_periodically(self) -> None:
        """Removes the folders of failed allocations once they are old enough."""
        interval = min(max(self.keep_failed_s / 4, 1.0), SWEEP_MAX_INTERVAL_S)
        while True:
            await asyncio.sleep(interval)
            try:
                await asyncio.to_thread(
                    workdir.sweep,
                    self.work_dir,
                    self.identity.agent_id,
                    running=set(self.table),
                    now=time.time(),
                    keep_failed_s=self.keep_failed_s,
                )
            except OSError as error:
                log.warning("allocation_folder_sweep_failed", error=str(error))

    def beat_for(self, registration_event_id: str) -> None:
        """Sends heartbeats for this registration (and no longer for an earlier one)."""
        if self.heartbeats is None or (self.beating is not None and self.beating[0] == registration_event_id):
            return
        if self.beating is not None:
            self.beating[1].cancel()
        task = asyncio.create_task(self.heartbeats(registration_event_id), name="heartbeats")
        task.add_done_callback(_log_failure)
        self.beating = (registration_event_id, task)

    async def on_state(self, state: AgentState) -> list[Append]:
        if not state.registered:
            return []  # what is assigned so far belongs to earlier runs of the agent
        if state.registration_event_id:
            self.beat_for(state.registration_event_id)
        if state.lost:  # the cluster gave up on this run: its allocations run elsewhere
            self._fence_all()
            return []  # until registered again (the core decides it)
        await self._remove_closed_containers(state)
        for allocation_id, allocation in state.allocations.items():
            running = self.table.get(allocation_id)
            if allocation.orphaned:
                if running is not None:  # a newer registration of this agent: it is no longer ours
                    self._fence(running)
                continue
            if running is None:
                running = self.table[allocation_id] = Running(allocation)
                running.task = asyncio.create_task(self._run(running), name=f"allocation-{allocation_id}")
                running.task.add_done_callback(_log_failure)
            if allocation.kill_requested and not running.kill_requested:
                self._kill(running)
            elif allocation.stop_requested and running.stop_timer is None:
                running.stop_timer = asyncio.create_task(self._kill_after_grace(running))
            elif not allocation.stop_requested and running.stop_timer is not None:
                running.stop_timer.cancel()  # the stop was withdrawn: the process runs on
                running.stop_timer = None
        for allocation_id in [a for a in self.table if a not in state.allocations]:
            # Its exit is folded: if its process still runs, another writer closed it.
            self._fence(self.table.pop(allocation_id))
        return []

    async def _remove_closed_containers(self, state: AgentState) -> None:
        """Once this run's registration is folded: the containers an earlier
        run left whose allocations the log closed go (the others are reattached)."""
        if not self.left_running or self.containers is None:
            return
        closed = [
            c for allocation_id, c in self.left_running.items() if allocation_id not in state.allocations
        ]
        self.left_running = {k: c for k, c in self.left_running.items() if k in state.allocations}
        if closed:
            log.info("closed_allocation_containers_removed", count=len(closed))
            await self.containers.remove(closed)

    async def stop(self) -> None:
        """Kills every process (the agent is going away); their allocations are
        closed as "agent restarted" when the agent starts again. Containers
        run on, to be reattached by the next run."""
        for running in self.table.values():
            process = running.process
            if isinstance(process, ContainerProcess):
                process.abandon()
            elif process is not None and process.returncode is None:
                _signal_group(process.pid, signal.SIGKILL)
            for task in (running.task, running.stop_timer, *running.watchers):
                if task is not None:
                    task.cancel()
            if running.shipper is not None:
                running.shipper.abandon()
        if self.fork_server is not None:
            await self.fork_server.close()
        if self.beating is not None:
            self.beating[1].cancel()
        if self.reaper is not None and self.reaper.stdin is not None:
            self.reaper.stdin.close()  # it kills what is left, and exits
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.reaper.wait(), REAPER_EXIT_TIMEOUT_S)

    # -- one allocation -----------------------------------------------------------

    async def _run(self, running: Running) -> None:
        allocation = running.allocation
        folder = self.work_dir / allocation.allocation_id
        if allocation.is_task and not plain_task_id(allocation.requested.task_id):
            # Not the gateway's (a UUID): it could name another's log subject or proxy path.
            error = f"task id {allocation.requested.task_id!r} is not letters, digits, - and _"
            log.warning("allocation_setup_failed", allocation_id=allocation.allocation_id, error=error)
            await self._end(running, SETUP_FAILED_EXIT_CODE, error=error, fatal=True)
            return
        shipper = running.shipper = LogShipper(
            self._log_publisher(allocation),
            trial_id=running.launch.trial_id,
            allocation_id=allocation.allocation_id,
            agent_id=self.identity.agent_id,
            spill_path=folder / SPILL_FILE,
            memory_bytes=self.log_memory_bytes,
            progress_path=folder / LOGS_SHIPPED_FILE if self.containers is not None else None,
        )
        left = self.left_running.pop(allocation.allocation_id, None)
        if left is not None and self.containers is not None:
            await self._reattach(running, shipper, folder, left)
            return
        if self.containers is None:  # what the config asks that a process cannot have
            config = json.loads(allocation.config_json or "{}")
            for notice in runtime_notices(config, "process"):
                shipper.add("stderr", f"determined agent: {notice}")
        try:
            argv, script = await self._prepare(allocation, folder)
            if running.kill_requested:  # asked before it could start
                await shipper.close()
                await self._end(running, -int(signal.SIGTERM), killed=True)
                return
            running.process = await self._spawn(running, folder, argv, script)
        # EventStoreError: the context is not stored, or damaged.
        except (AgentError, ContextError, EventStoreError, OSError, SubprocessError) as error:
            # A container the config asks for that this agent refuses: a restart cannot help.
            await self._fail(
                running, shipper, str(error) or repr(error), fatal=isinstance(error, ContainerConfigError)
            )
            return
        await self._finish(running, shipper, folder)

    async def _reattach(self, running: Running, shipper: LogShipper, folder: Path, container: Any) -> None:
        """Follows the container an earlier run of the agent started for this
        allocation, from the last line that run shipped."""
        assert self.containers is not None
        since = await asyncio.to_thread(read_progress, folder / LOGS_SHIPPED_FILE)
        try:
            running.process = self.containers.attach(container, since.since())
        except AgentError as error:
            await self._fail(running, shipper, str(error))
            return
        log.info(
            "allocation_reattached", allocation_id=running.allocation.allocation_id, pid=running.process.pid
        )
        running.port = self.containers.task_port(container)
        self._watch_task(running)  # its idleness is watched anew
        await self._finish(running, shipper, folder)

    async def _finish(self, running: Running, shipper: LogShipper, folder: Path) -> None:
        """Watches the started process to its end, then appends that end."""
        allocation = running.allocation
        assert running.process is not None
        exit_code = await self._watch(running, running.process, shipper, folder)
        for watcher in running.watchers:
            watcher.cancel()
        if isinstance(running.process, ContainerProcess):
            await running.process.remove()
        failed = exit_code != 0 and not running.kill_requested
        fatal = await asyncio.to_thread(fatal_error, folder) if failed else ""
        log.info(
            "allocation_exited",
            allocation_id=allocation.allocation_id,
            exit_code=exit_code,
            killed=running.kill_requested,
            fatal=fatal,
        )
        await self._end(running, exit_code, killed=running.kill_requested, error=fatal, fatal=bool(fatal))

    async def _fail(self, running: Running, shipper: LogShipper, error: str, *, fatal: bool = False) -> None:
        """The allocation could not start: the user reads why in the trial's logs."""
        allocation = running.allocation
        log.warning("allocation_setup_failed", allocation_id=allocation.allocation_id, error=error)
        shipper.add("stderr", f"determined agent: {error}")
        await shipper.close()
        await self._end(running, SETUP_FAILED_EXIT_CODE, error=error, fatal=fatal)

    async def _end(
        self, running: Running, exit_code: int, *, killed: bool = False, error: str = "", fatal: bool = False
    ) -> None:
        """The allocation's process is gone and its output shipped: its folder
        goes (or is kept a while, if it ended badly), then the end of this
        agent's part is appended (unless fenced: the log has closed it).
        `fatal`: the trial said why (`error`) a restart cannot help."""
        folder = self.work_dir / running.allocation.allocation_id
        try:
            await asyncio.to_thread(self._leave_folder, folder, exit_code, killed=killed, error=error)
        except OSError as failure:
            log.warning("allocation_folder_not_cleaned", folder=str(folder), error=str(failure))
        if running.fenced:
            log.info("allocation_fenced", allocation_id=running.allocation.allocation_id, exit_code=exit_code)
            return
        ended = part_ended(running.allocation, exit_code, killed=killed, error=error, fatal=fatal)
        await self._answer(running, ended)

    def _leave_folder(self, folder: Path, exit_code: int, *, killed: bool, error: str) -> None:
        """What the process started in its group goes with it; then its folder."""
        if workdir.kill_groups(self.work_dir, [folder.name]):
            log.info("allocation_leftovers_killed", allocation_id=folder.name)
        if not folder.is_dir():
            return
        if ended_well(exit_code, killed=killed, error=error):
            workdir.remove_folder(folder)
        else:
            workdir.note_bad_exit(
                folder, self.identity.agent_id, exit_code, killed=killed, error=error, now=time.time()
            )

    async def _prepare(self, allocation: AgentAllocation, folder: Path) -> tuple[list[str], list[str] | None]:
        """Makes the allocation's folder and its trial folder, with the context
        extracted and the config written (and a task's files); returns the
        command to run there and, when the fork server may run it instead,
        the script and its arguments."""
        data = None
        if allocation.context_hash:
            contexts, connection = self.store.contexts, self.store.connection
            data = await fetch_context(
                contexts, connection, allocation.context_hash, allocation_id=folder.name
            )
        user = self.containers.user if self.containers is not None else self.trial_user
        files = task_files(allocation) if allocation.is_task else {}
        await asyncio.to_thread(
            make_folders, folder, user, data, allocation.config_json, self.identity.master_cert_file, files
        )
        if allocation.is_task:
            return task_argv(allocation), None
        config = json.loads(allocation.config_json or "{}")
        startup_hook = (folder / TRIAL_FOLDER / STARTUP_HOOK).is_file()
        argv = entrypoint_argv(config, startup_hook=startup_hook)
        script = None
        if self.fork_server is not None and self.containers is None:
            script = forkable_argv(config, startup_hook=startup_hook, slot_type=self.slot_type)
        return argv, script

    async def _spawn(
        self, running: Running, folder: Path, argv: list[str], script: list[str] | None
    ) -> TrialProcess:
        """Starts the process in its own session, dying with the agent (or
        with the fork server, which dies with the agent); it writes its
        process record before it runs anything."""
        allocation = running.allocation
        config = json.loads(allocation.config_json or "{}")
        cwd = Path(working_dir(config, str(folder / TRIAL_FOLDER)))
        env = await self._environment(running, folder)
        if self.containers is not None:
            return await self._spawn_container(running, folder, argv, env)
        record = workdir.record_path(folder)
        storages = read_storages(allocation)
        tmp = TrialTmp.of(folder, self.work_dir, self.identity.python_bin_dir, config, storages)
        process: TrialProcess | None = None
        if script is not None and self.fork_server is not None:
            try:
                process = await self.fork_server.spawn(script, cwd, env, tmp=tmp.request())
            except ForkServerUnavailable as error:
                log.warning(
                    "fork_server_unavailable", allocation_id=allocation.allocation_id, error=str(error)
                )
            else:
                forked = ProcessRecord(
                    self.identity.agent_id, folder.name, process.pid, process.pid, process.start_ticks
                )
                await asyncio.to_thread(write_process_record, record, forked)
        if process is None:
            enter_tmp, note = await tmp.for_new_process(env)
            if note and running.shipper is not None:
                running.shipper.add("stderr", note)
            preexec = allocation_preexec(
                os.getpid(),
                record,
                self.identity.agent_id,
                allocation.allocation_id,
                _then(enter_tmp, as_user(self.trial_user)),  # its /tmp while it may still mount
            )
            process = await self._exec(cwd, argv, env, preexec)
        log.info(
            "allocation_started",
            allocation_id=allocation.allocation_id,
            pid=process.pid,
            argv=argv,
            forked=isinstance(process, ForkedProcess),
        )
        await self._answer(running, allocation_started(allocation, process.pid))
        self._watch_task(running)
        return process

    async def _environment(self, running: Running, folder: Path) -> dict[str, str]:
        """The process's environment: a trial's, with its allocation token; a
        task's, with the port its server listens on (chosen here)."""
        allocation = running.allocation
        if not allocation.is_task:
            token = mint_allocation_token(
                self.cluster_secret, running.launch.trial_id, allocation.allocation_id
            )
            return trial_environment(
                allocation,
                self.identity,
                session_token=token,
                slot_type=self.slot_type,
                inherited=os.environ,
                folder=folder,
                user=self.trial_user,
            )
        if has_server(allocation.requested.task_type):
            running.port = await asyncio.to_thread(free_port, self.identity.address)
        return task_environment(
            allocation,
            self.identity,
            port=running.port,
            token=task_proxy_token(self.cluster_secret, allocation.requested.task_id),
            slot_type=self.slot_type,
            inherited=os.environ,
            folder=folder,
            user=self.trial_user,
        )

    def _watch_task(self, running: Running) -> None:
        """A task's server: AllocationReady once it answers; a notebook with an
        idle_timeout is then watched for idleness. Both end with the process."""
        allocation = running.allocation
        if not allocation.is_task or not has_server(allocation.requested.task_type):
            return
        task = asyncio.create_task(self._until_ready(running), name=f"ready-{allocation.allocation_id}")
        task.add_done_callback(_log_failure)
        running.watchers.append(task)

    async def _until_ready(self, running: Running) -> None:
        allocation = running.allocation
        task_type, task_id = allocation.requested.task_type, allocation.requested.task_id
        host, prefix = self.identity.address, proxy_prefix(task_id)
        address = proxy_address(host, running.port)
        if not allocation.ready:  # (a reattached container's may be)
            await wait_until_ready(host, running.port, prefix, http=task_type in HTTP_SERVERS)
            log.info("allocation_ready", allocation_id=allocation.allocation_id, proxy_address=address)
            await self._answer(running, allocation_ready(allocation, address))
        settings = idle_settings(json.loads(allocation.config_json or "{}"))
        if task_type != NOTEBOOK or settings is None:
            return
        token = task_proxy_token(self.cluster_secret, task_id)
        base_url = f"http://{address}{prefix}"
        await watch_idle(base_url, token, settings, functools.partial(self._idle, running))

    async def _idle(self, running: Running, reason: str) -> None:
        """The notebook was idle too long: the kill is asked in the log (the
        task's history says why), and done as any kill is when it is folded."""
        log.info("allocation_idle", allocation_id=running.allocation.allocation_id, reason=reason)
        await self._answer(running, idle_kill_requested(running.allocation, reason))

    def _log_publisher(self, allocation: AgentAllocation) -> Publish:
        """Where the allocation's output goes: its trial's logs, or its task's."""
        if not allocation.is_task:
            return self.store.logs.publish
        requested = allocation.requested
        subject = self.store.logs.task_subject(requested.task_type, requested.task_id)
        return functools.partial(self.store.logs.publish, subject=subject)

    async def _spawn_container(
        self, running: Running, folder: Path, argv: list[str], env: dict[str, str]
    ) -> ContainerProcess:
        assert self.containers is not None
        allocation = running.allocation
        container = await self.containers.start(allocation, self.identity, folder, argv, env, self.slot_type)
        log.info("allocation_started", allocation_id=allocation.allocation_id, pid=container.pid, argv=argv)
        await self._answer(running, allocation_started(allocation, container.pid))
        self._watch_task(running)
        return container

    async def _exec(
        self, folder: Path, argv: list[str], env: dict[str, str], preexec: Callable[[], None]
    ) -> asyncio.subprocess.Process:
        # Started from the event loop's thread, which lives as long as the agent:
        # the parent-death signal follows the thread that forked.
        return await asyncio.create_subprocess_exec(
            *argv,
            cwd=folder,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,  # its own process group, killed as one
            preexec_fn=preexec,
            limit=MAX_LINE_BYTES,
        )

    async def _watch(self, running: Running, process: TrialProcess, shipper: LogShipper, folder: Path) -> int:
        """Ships the process's output until it exits; returns its exit code.
        What it started in its process group ends with it: when something
        still holds its output a moment after it exited, the group is killed."""
        if running.kill_requested:  # asked while it was starting
            self._kill(running)
        shipper.start()
        assert process.stdout is not None and process.stderr is not None
        stamped = isinstance(process, ContainerProcess)  # Docker's lines lead with their time
        output = asyncio.gather(
            shipper.follow(process.stdout, "stdout", timestamped=stamped),
            shipper.follow(process.stderr, "stderr", timestamped=stamped),
        )
        exit_code = await _exit_of(process, output)
        if not output.done():
            try:
                async with asyncio.timeout(OUTPUT_DRAIN_S):
                    await asyncio.shield(output)
            except TimeoutError:
                await asyncio.to_thread(workdir.kill_groups, self.work_dir, [folder.name])
                try:
                    async with asyncio.timeout(OUTPUT_DRAIN_S):
                        await output  # cancelled at the deadline
                except TimeoutError:  # held by a process that left the group
                    log.warning("allocation_output_left_open", allocation_id=running.allocation.allocation_id)
        await shipper.close()
        return exit_code

    async def _kill_after_grace(self, running: Running) -> None:
        """A stop request's deadline: the process had its grace period to
        checkpoint and exit; past it, it is killed (what it reported stays)."""
        # A task has nothing to save: it is killed at once.
        allocation = running.allocation
        timeout = 0 if allocation.is_task else experiment_config(allocation.config_json).preemption_timeout
        await asyncio.sleep(self.stop_grace_s if timeout is None else timeout)
        if running.process is None or running.process.returncode is None:
            log.info("allocation_stop_grace_expired", allocation_id=running.allocation.allocation_id)
            self._kill(running)

    def _kill(self, running: Running) -> None:
        running.kill_requested = True
        process = running.process
        if process is None or process.returncode is not None:
            return  # not started (it will not be), or gone: its group may be another's now
        if running.fenced:
            _signal_process(process, signal.SIGKILL)
        elif running.killer is None:
            running.killer = asyncio.create_task(self._terminate(process))

    def _fence_all(self) -> None:
        for running in self.table.values():
            self._fence(running)

    def _fence(self, running: Running) -> None:
        """Its allocation is no longer this run's to run: killed at once, and
        nothing more appended about it."""
        running.fenced = True
        self._kill(running)

    async def _terminate(self, process: TrialProcess) -> None:
        """SIGTERM to the process group; SIGKILL after the grace period."""
        _signal_process(process, signal.SIGTERM)
        try:
            async with asyncio.timeout(self.kill_grace_s):
                await asyncio.shield(process.wait())
        except TimeoutError:
            _signal_process(process, signal.SIGKILL)

    async def _answer(self, running: Running, append: Append) -> None:
        """Appends an event about an allocation, as an answer to its assignment
        (the store waits out a NATS outage; the msg id makes a repeat harmless)."""
        await self.store.append(running.allocation.answer(append), actor=self.actor)


async def _exit_of(process: TrialProcess, output: "asyncio.Future[Any]") -> int:
    """The process's exit code, once its output has ended or it has exited
    (whichever is first: processes it started may hold its output open)."""
    while not output.done():
        if process.returncode is not None:
            return process.returncode
        await asyncio.wait({output}, timeout=EXIT_POLL_S)
    return await process.wait()


def _log_failure(task: "asyncio.Task[None]") -> None:
    """An allocation's task that failed (a bug: its exit may not be in the log) says so at once."""
    if not task.cancelled() and task.exception() is not None:
        log.error("allocation_task_failed", task=task.get_name(), exc_info=task.exception())


def make_folders(
    folder: Path,
    user: OsUser | None,
    context: bytes | None,
    config_json: str,
    master_cert: str = "",
    files: Mapping[str, str] | None = None,
) -> None:
    """The allocation's folder (the agent's, 0711) with its config (0600, the
    trial user's: it may hold storage credentials), its empty FATAL_ERROR_FILE
    (0600, the trial user's to write), the other `files` a task reads (by
    name, written as its config is), a copy of the master's certificate
    (0644), its trial folder (0700, the trial user's) holding the
    extracted context, and the folder that is the trial's /tmp (0700, the
    trial user's). Blocking: run in a thread."""
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o711)
    written = {CONFIG_FILE: config_json or "{}", FATAL_ERROR_FILE: "", **(files or {})}
    for name, text in written.items():
        (folder / name).write_text(text)
        (folder / name).chmod(0o600)
        if user is not None:
            os.chown(folder / name, user.uid, user.gid)
    if master_cert:
        shutil.copyfile(master_cert, folder / MASTER_CERT_FILE)
        (folder / MASTER_CERT_FILE).chmod(0o644)
    trial = folder / TRIAL_FOLDER
    trial.mkdir(mode=0o700, exist_ok=True)
    if context is not None:
        extract_context(context, trial)
    tmp = folder / private_tmp.FOLDER  # the trial's own /tmp (`private_tmp.py`)
    tmp.mkdir(mode=0o700, exist_ok=True)
    if user is not None:
        _give(trial, user)
        os.chown(tmp, user.uid, user.gid)


def fatal_error(folder: Path) -> str:
    """Why the allocation's trial said a restart cannot help: the start of what it wrote
    in its FATAL_ERROR_FILE, "" when nothing. The file is the one `make_folders` made in
    the agent's folder, which a trial user cannot replace; opened without following a
    link or waiting on a pipe all the same. Blocking: run in a thread."""
    try:
        descriptor = os.open(folder / FATAL_ERROR_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return ""
    with os.fdopen(descriptor, "rb") as file:
        data = file.read(MAX_FATAL_ERROR_BYTES) if stat.S_ISREG(os.fstat(descriptor).st_mode) else b""
    return data.decode(errors="replace").strip()


def _give(folder: Path, user: OsUser) -> None:
    """Makes the folder and what is in it the user's (links themselves, never what they name)."""
    os.chown(folder, user.uid, user.gid)
    for root, folders, files in os.walk(folder):
        for name in folders + files:
            os.chown(os.path.join(root, name), user.uid, user.gid, follow_symlinks=False)


def as_user(user: OsUser | None) -> Callable[[], None]:
    """Run in a new child before it execs: it becomes `user` (no supplementary
    groups); None: it stays the agent's user."""

    def become() -> None:
        if user is not None:
            os.setgroups([])
            os.setgid(user.gid)
            os.setuid(user.uid)

    return become


def _then(first: Callable[[], None], second: Callable[[], None]) -> Callable[[], None]:
    def both() -> None:
        first()
        second()

    return both


def _signal_process(process: TrialProcess, signum: int) -> None:
    """Signals a trial: its container, or its process group."""
    if isinstance(process, ContainerProcess):
        process.send_signal(signum)
    else:
        _signal_group(process.pid, signum)


def _signal_group(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signum)
