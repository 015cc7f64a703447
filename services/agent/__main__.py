"""The agent: `python -m services.agent`.

Settings (env): DET_NATS_URL, DET_NAMESPACE, DET_AGENT_ID (default: the host
name), DET_AGENT_WORK_DIR, DET_AGENT_CPU_SLOTS (when NVML finds no GPU, or
DET_AGENT_GPUS=0 says not to look),
DET_MASTER_ADDRESS (given to trials as DET_MASTER), DET_CLUSTER_ID,
DET_CLUSTER_SECRET, DET_AGENT_KILL_GRACE_S, DET_AGENT_STOP_GRACE_S, DET_READY_FILE, DET_LOG_*,
DET_AGENT_FORK_SERVER (fork plain `python3 script.py` trials from a warm
process, `determined.exec.forkserver`) and DET_AGENT_PRELOAD (comma-separated
modules it imports besides determined and grpc, e.g. `torch,sklearn.datasets`).
"""

import socket
import sys
import uuid
from pathlib import Path

import structlog

from services.agent.core import AgentCore, agent_registered
from services.agent.launch import AgentIdentity
from services.agent.runner import ForkServer, Runner
from services.agent.slots import detect_slots
from services.common.decider import Shell
from services.common.eventstore import EventStore
from services.common.service import serve, write_ready
from services.common.settings import CommonSettings

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
    master_address: str = "127.0.0.1:8080"
    agent_fork_server: bool = False
    agent_preload: str = ""


async def run(settings: AgentSettings) -> None:
    """Registers this agent's slots, then runs what is assigned to it until
    cancelled."""
    structlog.contextvars.bind_contextvars(agent_id=settings.agent_id)
    store = await EventStore.connect(settings.nats_url, settings.namespace, name=f"agent-{settings.agent_id}")
    slots = detect_slots(settings.agent_cpu_slots, settings.agent_gpus)
    boot_id = uuid.uuid4().hex[:12]  # a new registration per start: see AgentCore
    await store.append(agent_registered(settings.agent_id, socket.gethostname(), slots, boot_id), actor=ACTOR)
    log.info(
        "agent_registered", slots=len(slots), slot_type=slots[0].type if slots else "none", boot_id=boot_id
    )
    runner = Runner(
        store,
        AgentIdentity(
            settings.agent_id, settings.cluster_id, settings.master_address, str(Path(sys.executable).parent)
        ),
        work_dir=settings.agent_work_dir,
        cluster_secret=settings.cluster_secret,
        slot_type=slots[0].type if slots else "cpu",
        actor=ACTOR,
        kill_grace_s=settings.agent_kill_grace_s,
        stop_grace_s=settings.agent_stop_grace_s,
        fork_server=ForkServer(_modules(settings.agent_preload)) if settings.agent_fork_server else None,
    )
    shell = Shell(
        store,
        AgentCore(settings.agent_id),
        ACTOR,
        on_state=runner.on_state,
        on_caught_up=lambda: write_ready(settings.ready_file),
    )
    try:
        await shell.run()
    finally:
        await runner.stop()
        await store.close()


def _modules(names: str) -> tuple[str, ...]:
    return tuple(name.strip() for name in names.split(",") if name.strip())


def main() -> None:
    serve("agent", AgentSettings(), run)


if __name__ == "__main__":
    main()
