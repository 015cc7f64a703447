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

from determined.proto import events_pb2

STARTUP_HOOK = "startup-hook.sh"
# `model_def:TrialClass`: a legacy Trial class, run by a harness that does not exist yet.
LEGACY_ENTRYPOINT = re.compile(r"^[\w.]+:\w+$")


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


def entrypoint_argv(config: dict, *, startup_hook: bool) -> list[str]:
    """The command to exec: a string entrypoint runs under `sh -c`, a list is
    exec'd as is; a startup hook is sourced first, in the same shell."""
    entrypoint = config.get("entrypoint")
    if isinstance(entrypoint, str):
        if LEGACY_ENTRYPOINT.match(entrypoint.strip()):
            raise EntrypointError(
                f"entrypoint {entrypoint!r} names a legacy Trial class, which this cluster cannot run yet; "
                "use a script entrypoint such as 'python3 train.py'"
            )
        argv = ["sh", "-c", entrypoint]
    elif isinstance(entrypoint, list) and entrypoint and all(isinstance(a, str) for a in entrypoint):
        argv = list(entrypoint)
    else:
        raise EntrypointError(f"the experiment has no runnable entrypoint: {entrypoint!r}")
    if startup_hook:
        return ["bash", "-c", f'set -e; source ./{STARTUP_HOOK}; exec "$@"', "bash", *argv]
    return argv


def trial_environment(
    assigned: events_pb2.AllocationAssigned,
    identity: AgentIdentity,
    *,
    session_token: str,
    slot_type: str,
    inherited: Mapping[str, str],
) -> dict[str, str]:
    """The trial's environment: the agent's own minus every DET_ setting (the
    cluster secret must never reach user code), plus the contract's variables
    and the config's `environment.environment_variables`."""
    config = json.loads(assigned.config_json or "{}")
    env = {k: v for k, v in inherited.items() if not k.startswith("DET_")}
    env["PATH"] = os.pathsep.join(p for p in (identity.python_bin_dir, inherited.get("PATH", "")) if p)
    env.update(_configured_variables(config, slot_type))
    env.update(
        DET_MASTER=identity.master_address,
        DET_CLUSTER_ID=identity.cluster_id,
        DET_AGENT_ID=identity.agent_id,
        DET_SLOT_IDS=json.dumps(list(assigned.slot_ids)),
        DET_TASK_ID=str(assigned.trial_id),
        DET_ALLOCATION_ID=assigned.allocation_id,
        DET_SESSION_TOKEN=session_token,
        DET_TASK_TYPE="TRIAL",
        DET_EXPERIMENT_ID=str(assigned.experiment_id),
        DET_TRIAL_ID=str(assigned.trial_id),
        DET_TRIAL_RUN_ID=str(assigned.trial_run_id),
        DET_TRIAL_SEED=str(assigned.trial_seed),
        DET_EXPERIMENT_CONFIG=assigned.config_json,
        DET_HPARAMS=assigned.hparams_json,
        DET_STEPS_COMPLETED=str(assigned.steps_completed),
        PYTHONUNBUFFERED="1",
    )
    if assigned.latest_checkpoint:
        env["DET_LATEST_CHECKPOINT"] = assigned.latest_checkpoint
    return env


def _configured_variables(config: dict, slot_type: str) -> dict[str, str]:
    """`environment.environment_variables`: a list of NAME=VALUE, or a map of
    such lists by slot type (cpu / cuda)."""
    variables = (config.get("environment") or {}).get("environment_variables") or []
    if isinstance(variables, dict):
        variables = variables.get(slot_type) or []
    pairs = (str(item).partition("=") for item in variables)
    return {name: value for name, sep, value in pairs if name and sep}
