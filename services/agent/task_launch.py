"""What a notebook's, TensorBoard's, command's or shell's process is started
with: its command line, its environment and the files it reads. Plain
functions, like `launch.py` for trials.

A COMMAND runs in a shell, as Determined runs it (`det cmd run 'echo hi;
exit 3'`): `/bin/sh -c` with its arguments joined by spaces. The others run
`python3 -m determined.exec.<kind>` (python3 is the agent's, first on PATH,
or the image's), which serves on DET_TASK_HOST:DET_TASK_PORT under
DET_PROXY_PREFIX, the path the gateway forwards under. It binds the agent's
own address, never every interface: the gateway reaches it there, and a
notebook asks every request for its token (DET_TASK_TOKEN, which the gateway's
proxy sends), so no other local user drives it.

The task's config is in the allocation's CONFIG_FILE (DET_TASK_CONFIG_FILE);
a TensorBoard's trials, with their storage, in TENSORBOARD_SOURCES_FILE
(DET_TENSORBOARD_SOURCES_FILE): both 0600, the task user's, beside it.
"""

import ipaddress
import json
import posixpath
import re
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from services.agent.core import AgentAllocation
from services.agent.launch import CONFIG_FILE, AgentIdentity, EntrypointError, allocation_environment
from services.common.os_users import OsUser

COMMAND = "COMMAND"
NOTEBOOK = "NOTEBOOK"
TENSORBOARD = "TENSORBOARD"
SHELL = "SHELL"
# The task types that run a module of the harness: its name under determined.exec.
EXEC_MODULES = {NOTEBOOK: "notebook", TENSORBOARD: "tensorboard", SHELL: "shell"}
# Those whose server speaks HTTP (readiness is an answer to GET DET_PROXY_PREFIX).
HTTP_SERVERS = frozenset({NOTEBOOK, TENSORBOARD})
TENSORBOARD_SOURCES_FILE = ".det-tensorboard-sources.json"
# A task id names its log subject and its proxy path: the gateway's are UUIDs.
_TASK_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def has_server(task_type: str) -> bool:
    """Whether the task serves something the gateway forwards to (all but a command)."""
    return task_type in EXEC_MODULES


def plain_task_id(task_id: str) -> bool:
    """Whether the id can name a log subject and a proxy path (letters, digits, - and _)."""
    return bool(_TASK_ID.match(task_id))


def task_argv(allocation: AgentAllocation) -> list[str]:
    """The command the task runs. EntrypointError: nothing this agent can run."""
    task_type = allocation.requested.task_type
    if task_type == COMMAND:
        words = list(allocation.task.command) or _entrypoint(json.loads(allocation.config_json or "{}"))
        if not any(word.strip() for word in words):
            raise EntrypointError("the command is empty, and the config names no entrypoint")
        return ["/bin/sh", "-c", " ".join(words)]
    module = EXEC_MODULES.get(task_type)
    if module is None:
        raise EntrypointError(f"this agent cannot run a task of type {task_type!r}")
    return ["python3", "-m", f"determined.exec.{module}"]


def _entrypoint(config: Mapping[str, Any]) -> list[str]:
    """The config's entrypoint: what a command runs when its command line gives nothing."""
    entrypoint = config.get("entrypoint")
    if isinstance(entrypoint, str):
        return [entrypoint]
    if isinstance(entrypoint, list):
        return [str(word) for word in entrypoint]
    return []


def task_files(allocation: AgentAllocation) -> dict[str, str]:
    """The files beside the config the task reads (a TensorBoard's sources), by name."""
    if allocation.requested.task_type != TENSORBOARD:
        return {}
    sources = [
        {
            "experiment_id": source.experiment_id,
            "trial_id": source.trial_id,
            "storage": json.loads(source.storage_json or "{}"),
        }
        for source in allocation.task.tensorboard_sources
    ]
    return {TENSORBOARD_SOURCES_FILE: json.dumps(sources)}


def read_storages(allocation: AgentAllocation) -> list[dict[str, Any]]:
    """The checkpoint storages the task reads, besides its config's own (a
    TensorBoard's trials'): their shared_fs folders must be in its reach."""
    if not allocation.is_task:
        return []
    storages = (json.loads(source.storage_json or "{}") for source in allocation.task.tensorboard_sources)
    return [storage for storage in storages if isinstance(storage, dict)]


def working_dir(config: Mapping[str, Any], trial_folder: str) -> str:
    """Where the process starts: the config's `work_dir` (a task's; relative to
    the context's folder), else the context's folder."""
    chosen = config.get("work_dir")
    if not isinstance(chosen, str) or not chosen.strip():
        return trial_folder
    return posixpath.normpath(posixpath.join(trial_folder, chosen))


def proxy_prefix(task_id: str) -> str:
    return f"/proxy/{task_id}/"


def proxy_address(host: str, port: int) -> str:
    """ "host:port", an IPv6 address in brackets."""
    try:
        bracketed = ipaddress.ip_address(host).version == 6
    except ValueError:
        bracketed = False
    return f"[{host}]:{port}" if bracketed else f"{host}:{port}"


def free_port(host: str) -> int:
    """A TCP port free on `host` now (the task binds it a moment later)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def task_environment(
    allocation: AgentAllocation,
    identity: AgentIdentity,
    *,
    port: int,
    token: str,
    slot_type: str,
    inherited: Mapping[str, str],
    folder: Path,
    user: OsUser | None = None,
) -> dict[str, str]:
    """The task's environment: what every allocation gets
    (`launch.allocation_environment`) and the task contract's variables. A
    task gets no token of the cluster's: DET_TASK_TOKEN is its own server's."""
    task = allocation.task
    task_type = allocation.requested.task_type
    contract = {"DET_TASK_CONFIG_FILE": str(folder / CONFIG_FILE)}
    if has_server(task_type):
        contract.update(
            DET_TASK_HOST=identity.address,
            DET_TASK_PORT=str(port),
            DET_PROXY_PREFIX=proxy_prefix(allocation.requested.task_id),
        )
    if task_type == NOTEBOOK:
        contract["DET_TASK_TOKEN"] = token
    if task_type == TENSORBOARD:
        contract["DET_TENSORBOARD_SOURCES_FILE"] = str(folder / TENSORBOARD_SOURCES_FILE)
    if task_type == SHELL:
        contract["DET_SHELL_PUBLIC_KEY"] = task.shell_public_key
    return allocation_environment(
        allocation, identity, contract, slot_type=slot_type, inherited=inherited, folder=folder, user=user
    )
