"""What a trial process is started with: its command line and its
environment (docs/CONTRACTS.md, "Trial processes"). Plain functions, so the
contract is unit-tested without starting anything.

Errors:

    AgentError
    └── EntrypointError   an entrypoint this agent cannot run
"""

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from determined.common import entrypoint as shared
from determined.common.entrypoint import STARTUP_HOOK, configured_variables
from determined.common.ports import allocation_ports
from determined.proto import events_pb2
from services.agent.core import AgentAllocation
from services.agent.gpus import gpu_variables
from services.common.os_users import OsUser

# STARTUP_HOOK is re-exported for runner.py.
__all__ = [
    "CONFIG_FILE",
    "FATAL_ERROR_FILE",
    "MASTER_CERT_FILE",
    "STARTUP_HOOK",
    "TRIAL_FOLDER",
    "AgentError",
    "AgentIdentity",
    "EntrypointError",
    "allocation_environment",
    "entrypoint_argv",
    "forkable_argv",
    "trial_environment",
]


# In an allocation's folder: its experiment config (JSON), named by DET_EXPERIMENT_CONFIG_FILE.
# Not in the environment: a config may be larger than the kernel's limit on one
# variable (128 KiB), and everything in the environment is copied to each process.
CONFIG_FILE = ".det-experiment-config.json"
# In an allocation's folder: the file, the trial's to write, named by DET_FATAL_ERROR_FILE,
# where a trial process says why a restart cannot help (determined.core._fatal).
FATAL_ERROR_FILE = ".det-fatal-error"
# In an allocation's folder: the folder the trial runs in (its context, its HOME).
TRIAL_FOLDER = "trial"
# In an allocation's folder: a copy of the certificate the master's must chain to
# (the operator's file may be where the trial user cannot read it).
MASTER_CERT_FILE = "master-cert.pem"

# What a trial gets of the agent's own environment: locale, time zone, proxies,
# CA bundles, the GPU stack's settings. Nothing else (the agent's environment holds
# the cluster secret and its NATS password; the operator's may hold anything).
PASSED_VARIABLES = frozenset(
    {
        "LANG",
        "LANGUAGE",
        "TZ",
        "TERM",
        "LD_LIBRARY_PATH",
        # A process trial runs the agent's own Python, so it must import the `determined` the
        # agent does, also where that is a checkout on PYTHONPATH rather than an install.
        "PYTHONPATH",
        "OMP_NUM_THREADS",
        "http_proxy",
        "https_proxy",
        "no_proxy",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "REQUESTS_CA_BUNDLE",
    }
)
PASSED_PREFIXES = ("LC_", "CUDA_", "NVIDIA_", "NCCL_")
# Passed only when the trial runs as the agent's own user (a trial user gets its own).
OWN_USER_VARIABLES = ("HOME", "USER", "LOGNAME")


def passed_on(inherited: Mapping[str, str], *, own_user: bool) -> dict[str, str]:
    """The agent's variables a trial gets (PASSED_VARIABLES, PASSED_PREFIXES;
    HOME, USER and LOGNAME when it runs as the agent's user). Never a DET_ one."""
    return {
        name: value
        for name, value in inherited.items()
        if name in PASSED_VARIABLES
        or name.startswith(PASSED_PREFIXES)
        or (own_user and name in OWN_USER_VARIABLES)
    }


class AgentError(Exception):
    pass


class EntrypointError(AgentError):
    pass


@dataclass(frozen=True)
class AgentIdentity:
    agent_id: str
    cluster_id: str
    master_address: str
    # The directory of the agent's Python: first on the trial's PATH, so that
    # `python3` there can `import determined`.
    python_bin_dir: str
    # Where the other workers of a gang reach this agent's processes.
    address: str = "127.0.0.1"
    # The master's TLS, for the trials' connections (DET_MASTER_CERT_FILE and
    # DET_MASTER_CERT_NAME, see determined._client.master_channel); "": none given.
    master_cert_file: str = ""
    master_cert_name: str = ""
    # The slots it registered: which GPU each CUDA slot is (services/agent/gpus.py).
    slots: tuple[events_pb2.Slot, ...] = ()


def entrypoint_argv(config: dict[str, Any], *, startup_hook: bool) -> list[str]:
    """The command to exec for the config's entrypoint (see
    `determined.common.entrypoint`): a legacy `module:Class` entrypoint runs
    under the torch launcher, which starts `determined.exec.harness` per slot."""
    entrypoint = shared.launch_entrypoint(config.get("entrypoint"))
    try:
        return shared.entrypoint_argv(entrypoint, startup_hook=startup_hook)
    except shared.EntrypointError as error:
        raise EntrypointError(str(error)) from None


# A word `sh -c` would pass on as is: no quoting, expansion or operator.
_PLAIN_WORD = re.compile(r"^[A-Za-z0-9_@%+=:,./-]+$")
# Variables that change how the interpreter starts: a forked child would not honour them.
_INTERPRETER_VARIABLE = re.compile(r"^(PATH|LD_\w*|PYTHON\w*)$")


def forkable_argv(config: dict[str, Any], *, startup_hook: bool, slot_type: str) -> list[str] | None:
    """The script and its arguments (the child's `sys.argv`) when the
    entrypoint may run in a child of the agent's fork server: exactly
    `python3|python <script.py> [args...]` (a string of plain words, or a
    list), no startup hook, and no configured variable that changes how the
    interpreter starts (PATH, LD_*, PYTHON* but PYTHONUNBUFFERED). None: it
    runs as a new process, as `entrypoint_argv` says."""
    if startup_hook:
        return None
    entrypoint = shared.launch_entrypoint(config.get("entrypoint"))
    if isinstance(entrypoint, str):
        words = entrypoint.split()
        if not all(_PLAIN_WORD.match(word) for word in words):
            return None
    elif isinstance(entrypoint, list) and all(isinstance(word, str) for word in entrypoint):
        words = list(entrypoint)
    else:
        return None
    if len(words) < 2 or words[0] not in ("python3", "python"):
        return None
    if not words[1].endswith(".py") or words[1].startswith("-"):
        return None
    variables = configured_variables(config, slot_type)
    if any(_INTERPRETER_VARIABLE.match(name) and name != "PYTHONUNBUFFERED" for name in variables):
        return None
    return words[1:]


def trial_environment(
    allocation: AgentAllocation,
    identity: AgentIdentity,
    *,
    session_token: str,
    slot_type: str,
    inherited: Mapping[str, str],
    folder: Path,
    user: OsUser | None = None,
) -> dict[str, str]:
    """The trial's environment (`allocation_environment`). Its config is in
    CONFIG_FILE in `folder`, the allocation's (written by the runner).

    The rank layout (DET_CONTAINER_*, DET_CHIEF_IP) and the ports the gang's
    workers meet on are set for every allocation, one agent or several: every
    agent of a gang computes the same ports from the cluster's id and the
    allocation id."""
    launch = allocation.launch
    # This agent's own address where its placement carries none (an old log's).
    addrs = list(allocation.container_addrs) or [""]
    addrs[allocation.container_rank] = addrs[allocation.container_rank] or identity.address
    slot_counts = allocation.container_slot_counts or (len(allocation.slot_ids),)
    c10d_port, comm_port_1, comm_port_2 = allocation_ports(allocation.allocation_id, identity.cluster_id)
    contract = {
        "DET_CONTAINER_RANK": str(allocation.container_rank),
        "DET_CONTAINER_ADDRS": json.dumps(addrs),
        "DET_CONTAINER_SLOT_COUNTS": json.dumps(list(slot_counts)),
        "DET_CHIEF_IP": addrs[0],
        "C10D_PORT": str(c10d_port),
        "INTER_TRAIN_PROCESS_COMM_PORT_1": str(comm_port_1),
        "INTER_TRAIN_PROCESS_COMM_PORT_2": str(comm_port_2),
        "DET_SESSION_TOKEN": session_token,
        "DET_EXPERIMENT_ID": str(launch.experiment_id),
        "DET_TRIAL_ID": str(launch.trial_id),
        "DET_TRIAL_RUN_ID": str(launch.trial_run_id),
        "DET_TRIAL_SEED": str(launch.trial_seed),
        "DET_EXPERIMENT_CONFIG_FILE": str(folder / CONFIG_FILE),
        "DET_HPARAMS": launch.hparams_json,
        "DET_STEPS_COMPLETED": str(launch.steps_completed),
        "DET_SEARCHER_LENGTH": str(launch.searcher_length),
    }
    if launch.latest_checkpoint:
        contract["DET_LATEST_CHECKPOINT"] = launch.latest_checkpoint
    return allocation_environment(
        allocation, identity, contract, slot_type=slot_type, inherited=inherited, folder=folder, user=user
    )


def allocation_environment(
    allocation: AgentAllocation,
    identity: AgentIdentity,
    contract: Mapping[str, str],
    *,
    slot_type: str,
    inherited: Mapping[str, str],
    folder: Path,
    user: OsUser | None = None,
) -> dict[str, str]:
    """What every allocation's process gets, a trial's or a task's: what
    `passed_on` keeps of the agent's own environment (no secret of the
    cluster's: none of its DET_ settings), the config's
    `environment.environment_variables`, the ids every process gets and its
    kind's `contract` variables. A process that runs as `user` has the
    allocation's TRIAL_FOLDER as HOME."""
    config = json.loads(allocation.config_json or "{}")
    env = passed_on(inherited, own_user=user is None)
    if user is not None:
        env.update(HOME=str(folder / TRIAL_FOLDER), USER=user.name, LOGNAME=user.name)
    env["PATH"] = os.pathsep.join(p for p in (identity.python_bin_dir, inherited.get("PATH", "")) if p)
    env.update(configured_variables(config, slot_type))
    env.update(
        DET_MASTER=identity.master_address,
        DET_CLUSTER_ID=identity.cluster_id,
        DET_AGENT_ID=identity.agent_id,
        DET_SLOT_IDS=json.dumps(list(allocation.slot_ids)),
        DET_TASK_ID=allocation.requested.task_id,
        DET_ALLOCATION_ID=allocation.allocation_id,
        DET_TASK_TYPE=allocation.requested.task_type,
        # Where the process says why it cannot run (read when it exits non-zero).
        DET_FATAL_ERROR_FILE=str(folder / FATAL_ERROR_FILE),
        PYTHONUNBUFFERED="1",
    )
    env.update(contract)
    env.update(_master_tls(identity, folder))
    env.update(gpu_variables(allocation.slot_ids, identity.slots))  # its slots' GPUs, and no other
    return env


def _master_tls(identity: AgentIdentity, folder: Path) -> dict[str, str]:
    """The variables that tell the trial's client how to check the master's certificate
    (its copy in the allocation's folder)."""
    copy = str(folder / MASTER_CERT_FILE) if identity.master_cert_file else ""
    tls = {"DET_MASTER_CERT_FILE": copy, "DET_MASTER_CERT_NAME": identity.master_cert_name}
    return {name: value for name, value in tls.items() if value}
