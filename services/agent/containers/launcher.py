"""What the runner asks of the Docker runtime: start an allocation's
container, find the containers an earlier run of the agent left, follow one
again. The pure choices are `spec.py`'s; this does the I/O around them.

Who a container runs as (`container_user`): the agent's trial user when it
has one; else the agent's own user when that is not root; else `nobody`
(65534): a non-root default rather than root, since the config is untrusted.
"""

import asyncio
import json
import os
import pwd
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from services.agent.containers.bundle import HarnessBundle, harness_packages
from services.agent.containers.runtime import ContainerProcess, DockerRuntime, remove
from services.agent.containers.spec import ALLOCATION_LABEL, Allowed, Placement, container_spec
from services.agent.core import AgentAllocation
from services.agent.gpus import allocation_gpu_uuids
from services.agent.launch import AgentIdentity
from services.agent.task_launch import read_storages
from services.common.os_users import OsUser

NOBODY = 65534
# Where the Docker daemon listens, as trials must never reach it.
DOCKER_SOCKETS = ("/var/run/docker.sock", "/run/docker.sock")

log = structlog.get_logger()


def container_user(trial_user: OsUser | None, euid: int) -> OsUser:
    """Who containers run as (see the module's docstring)."""
    if trial_user is not None:
        return trial_user
    uid = euid if euid != 0 else NOBODY
    try:
        entry = pwd.getpwuid(uid)
        return OsUser(entry.pw_name, uid, entry.pw_gid, frozenset())
    except KeyError:
        return OsUser(str(uid), uid, uid if uid == NOBODY else os.getegid(), frozenset())


def gpu_device_ids(slot_ids: Sequence[int], identity: AgentIdentity, slot_type: str) -> tuple[str, ...]:
    """The GPUs a container of these slots gets: by UUID; by index where the
    registration carries none (an older one)."""
    uuids = allocation_gpu_uuids(slot_ids, identity.slots)
    if uuids or slot_type != "cuda":
        return tuple(uuids)
    return tuple(str(slot_id) for slot_id in slot_ids)


@dataclass
class Containers:
    runtime: DockerRuntime
    user: OsUser
    allowed: Allowed = Allowed()
    # The image of a config that names none ("": such a config is refused).
    default_image: str = ""
    # The interpreter whose harness packages are mounted (the agent's); None:
    # none are (an agent in a container: the daemon cannot see its paths).
    python: str | None = sys.executable
    _bundle: HarnessBundle | None = field(default=None, repr=False)

    async def prepare(self) -> None:
        """Finds the harness packages before the first trial needs them (a child
        interpreter imports them: a second or two)."""
        if self.python is not None and self._bundle is None:
            try:
                self._bundle = await asyncio.to_thread(harness_packages, self.python)
            except (subprocess.SubprocessError, OSError, ValueError, KeyError) as error:
                # Tried again at the next start; meanwhile images need their own determined.
                log.warning("harness_packages_not_found", python=self.python, error=str(error))

    async def start(
        self,
        allocation: AgentAllocation,
        identity: AgentIdentity,
        folder: Path,
        argv: Sequence[str],
        env: Mapping[str, str],
        slot_type: str,
    ) -> ContainerProcess:
        """Starts the allocation's container. ContainerConfigError (the config),
        ContainerError (the image, the registry, the daemon)."""
        await self.prepare()
        bundle = self._bundle
        placement = Placement(
            allocation_id=allocation.allocation_id,
            task_id=allocation.requested.task_id,
            trial_id=allocation.launch.trial_id,
            agent_id=identity.agent_id,
            slot_type=slot_type,
            folder=str(folder),
            uid=self.user.uid,
            gid=self.user.gid,
            gpu_uuids=gpu_device_ids(allocation.slot_ids, identity, slot_type),
        )
        config = json.loads(allocation.config_json or "{}")
        spec = await asyncio.to_thread(
            container_spec,
            config,
            placement,
            bundle.wrap(argv) if bundle else argv,
            {**env, **bundle.variables} if bundle else env,
            allowed=self.allowed,
            default_image=self.default_image,
            harness=bundle.mounts if bundle else (),
            read_storages=read_storages(allocation),
            resolve=os.path.realpath,
        )
        return await self.runtime.start(spec)

    async def left_running(self, agent_id: str, work_dir: Path) -> dict[str, Any]:
        """The containers an earlier run of the agent left, by allocation id
        (the daemon unreachable: none; what it says next is in the trials' logs)."""
        try:
            found = await asyncio.to_thread(self.runtime.containers_of, agent_id, str(work_dir))
        except Exception:  # noqa: BLE001 - ContainerError or the daemon's: nothing to reattach
            return {}
        return {str(c.labels.get(ALLOCATION_LABEL, "")): c for c in found}

    @staticmethod
    def task_port(container: Any) -> int:
        """The port a task's container serves on (its DET_TASK_PORT; 0: none)."""
        variables = (container.attrs.get("Config") or {}).get("Env") or []
        ports = [v.partition("=")[2] for v in variables if v.startswith("DET_TASK_PORT=")]
        return int(ports[0]) if ports and ports[0].isdigit() else 0

    def attach(self, container: Any, since_ns: Mapping[str, int]) -> ContainerProcess:
        return self.runtime.attach(container, since_ns)

    async def remove(self, containers: Sequence[Any]) -> None:
        await asyncio.gather(*(asyncio.to_thread(remove, c) for c in containers))
