"""The agent: `python -m services.agent`.

Settings (env): DET_NATS_URL, DET_NAMESPACE, DET_AGENT_ID (default: the host
name), DET_AGENT_WORK_DIR, DET_AGENT_CPU_SLOTS (when NVML finds no GPU, or
DET_AGENT_GPUS=0 says not to look),
DET_MASTER_ADDRESS (given to trials as DET_MASTER; https://host:port when the
master serves TLS), DET_MASTER_CERT_FILE and DET_MASTER_CERT_NAME (given to
trials as they are: the certificate the master's must chain to, the name to
check in it), DET_CLUSTER_ID,
DET_CLUSTER_SECRET, DET_AGENT_KILL_GRACE_S, DET_AGENT_STOP_GRACE_S,
DET_AGENT_KEEP_FAILED_S (how long the folder of an allocation that ended
badly is kept, for debugging; default 24 h), DET_AGENT_LOG_MEMORY_BYTES (how
much of an allocation's output waits in memory while NATS is unreachable; the
rest waits in a file in its folder), DET_READY_FILE, DET_LOG_*,
DET_AGENT_FORK_SERVER (fork plain `python3 script.py` trials from a warm
process, `determined.exec.forkserver`; on by default, 0 turns it off), DET_AGENT_PRELOAD (comma-separated
modules it imports besides determined and grpc, e.g. `torch,sklearn.datasets`),
DET_AGENT_POOL (the resource pool it offers its slots to, default
"default"), DET_AGENT_ADDRESS (where other agents' workers reach its
processes; default: this host's address toward NATS, `address.py`) and
DET_AGENT_HEARTBEAT_S (how often it tells the scheduler it is alive),
DET_AGENT_TRIAL_USER (as root: the unprivileged OS user trials run as,
created if missing; "": as the agent's own user, see `trial_user.py`),
DET_AGENT_RUNTIME ("process", the default, or "docker": each allocation a
container, `containers/`), and for Docker: DET_AGENT_DEFAULT_IMAGE (the
image of a config that names none), DET_AGENT_ALLOWED_CAPABILITIES (the
comma-separated capabilities a config may add; default none) and
DET_AGENT_PROTECTED_PATHS (comma-separated host paths no bind mount may
reach, besides the Docker socket and the agent's work dir: the cluster's
data and secrets) and DET_AGENT_HARNESS_MOUNTS (default true: mount the
agent's harness into containers whose image lacks it, `containers/bundle.py`;
false for an agent that itself runs in a container).
"""

import asyncio
import os
import socket
import sys
import uuid
from pathlib import Path
from typing import Annotated, Literal

import structlog
from pydantic import Field

from services.agent.address import advertised_address
from services.agent.containers.launcher import DOCKER_SOCKETS, Containers, container_user
from services.agent.containers.runtime import DockerRuntime
from services.agent.containers.spec import Allowed
from services.agent.core import AgentCore, agent_registered, registration_id
from services.agent.launch import AgentIdentity
from services.agent.logs import MEMORY_BYTES
from services.agent.runner import ForkServer, Runner
from services.agent.slots import detect_slots
from services.agent.trial_user import TRIAL_VENV_SUFFIX, trial_python_bin_dir, trial_user
from services.common.decider import Shell
from services.common.heartbeats import send_heartbeats
from services.common.os_users import OsUser
from services.common.scheduling import DEFAULT_POOL
from services.common.service import connect_part, serve, write_ready
from services.common.settings import CommonSettings, MasterCertificate

ACTOR = "service:agent"

log = structlog.get_logger()


class AgentSettings(CommonSettings):
    agent_id: str = socket.gethostname()
    agent_work_dir: Path = Path("/tmp/determined-agent")
    agent_cpu_slots: int = 1
    agent_gpus: bool = True
    agent_kill_grace_s: float = 10.0
    # How long a stopped allocation may take to checkpoint and exit, when its
    # config sets no preemption_timeout (Determined's default: an hour).
    agent_stop_grace_s: float = 3600.0
    agent_keep_failed_s: Annotated[float, Field(ge=0)] = 24 * 3600.0
    # Per allocation: output waiting in memory for NATS; past it, in a file.
    agent_log_memory_bytes: Annotated[int, Field(ge=0)] = MEMORY_BYTES
    master_address: str = "127.0.0.1:8080"
    agent_fork_server: bool = True
    agent_preload: str = ""
    agent_pool: str = DEFAULT_POOL
    # "": this host's address toward NATS (`advertised_address`).
    agent_address: str = ""
    agent_heartbeat_s: Annotated[float, Field(gt=0)] = 1.0
    agent_trial_user: str = ""
    # How it runs allocations: as processes, or as Docker containers (DET_AGENT_RUNTIME).
    agent_runtime: Literal["process", "docker"] = "process"
    agent_default_image: str = ""
    agent_allowed_capabilities: str = ""
    agent_protected_paths: str = ""
    # Mount the agent's harness packages into containers whose image lacks them
    # (off for an agent that runs in a container: the daemon cannot see its paths).
    agent_harness_mounts: bool = True


async def run(settings: AgentSettings) -> None:
    """Kills what an earlier run of this agent left running, registers this
    agent's slots, then runs what is assigned to it until cancelled."""
    structlog.contextvars.bind_contextvars(agent_id=settings.agent_id)
    store = await connect_part(settings, f"agent-{settings.agent_id}", "agent")
    slots = detect_slots(settings.agent_cpu_slots, settings.agent_gpus)
    certificate = MasterCertificate()
    address = settings.agent_address or advertised_address(settings.nats_url)
    user = trial_user(settings.agent_trial_user, euid=os.geteuid())
    if user is None and os.geteuid() == 0:
        log.warning("trials_run_as_root", hint="set DET_AGENT_TRIAL_USER to an unprivileged user")
    python_bin_dir = await asyncio.to_thread(
        trial_python_bin_dir, user, Path(f"{settings.agent_work_dir}{TRIAL_VENV_SUFFIX}")
    )
    runner = Runner(
        store,
        AgentIdentity(
            settings.agent_id,
            settings.cluster_id,
            settings.master_address,
            str(python_bin_dir),
            address,
            certificate.file,
            certificate.name,
            slots=tuple(slots),
        ),
        work_dir=settings.agent_work_dir,
        cluster_secret=settings.cluster_secret,
        slot_type=slots[0].type if slots else "cpu",
        actor=ACTOR,
        kill_grace_s=settings.agent_kill_grace_s,
        stop_grace_s=settings.agent_stop_grace_s,
        keep_failed_s=settings.agent_keep_failed_s,
        log_memory_bytes=settings.agent_log_memory_bytes,
        fork_server=(
            ForkServer(_modules(settings.agent_preload), user, _python(python_bin_dir))
            if settings.agent_fork_server
            else None
        ),
        trial_user=user,
        containers=_containers(settings, user) if settings.agent_runtime == "docker" else None,
        heartbeats=lambda registration: send_heartbeats(
            store.nc, settings.namespace, settings.agent_id, registration, settings.agent_heartbeat_s
        ),
    )
    # Before registering: the allocations an earlier run left open are closed
    # as lost once this registration is folded, and run again elsewhere.
    await runner.recover()
    await runner.start_reaper()
    boot_id = uuid.uuid4().hex[:12]  # a new registration per start: see AgentCore
    registration = agent_registered(
        settings.agent_id,
        socket.gethostname(),
        slots,
        boot_id,
        resource_pool=settings.agent_pool,
        address=address,
        runtime=settings.agent_runtime,
    )
    await store.append(registration, actor=ACTOR)
    runner.beat_for(registration_id(settings.agent_id, boot_id))
    log.info(
        "agent_registered",
        slots=len(slots),
        slot_type=slots[0].type if slots else "none",
        boot_id=boot_id,
        resource_pool=settings.agent_pool,
        address=address,
    )
    shell = Shell(
        store,
        AgentCore(settings.agent_id, boot_id, adopted=frozenset(runner.left_running)),
        ACTOR,
        on_state=runner.on_state,
        on_caught_up=lambda: write_ready(settings.ready_file),
    )
    sweeper = asyncio.create_task(runner.sweep_periodically(), name="sweep-allocation-folders")
    try:
        await shell.run()
    finally:
        sweeper.cancel()
        await runner.stop()
        await store.close()


def _python(bin_dir: Path) -> str:
    """The trials' interpreter: the agent's own, or python3 of the trials' venv."""
    return sys.executable if bin_dir == Path(sys.executable).parent else str(bin_dir / "python3")


def _modules(names: str) -> tuple[str, ...]:
    return tuple(name.strip() for name in names.split(",") if name.strip())


def _containers(settings: AgentSettings, user: OsUser | None) -> Containers:
    """The Docker runtime, as the settings say (see the module's docstring)."""
    protected = (*DOCKER_SOCKETS, str(settings.agent_work_dir), *_modules(settings.agent_protected_paths))
    allowed = Allowed(
        capabilities=frozenset(
            name.upper().removeprefix("CAP_") for name in _modules(settings.agent_allowed_capabilities)
        ),
        protected_paths=tuple(os.path.realpath(path) for path in protected),
    )
    python = sys.executable if settings.agent_harness_mounts else None
    return Containers(
        DockerRuntime(), container_user(user, os.geteuid()), allowed, settings.agent_default_image, python
    )


def main() -> None:
    serve("agent", AgentSettings(), run)


if __name__ == "__main__":
    main()
