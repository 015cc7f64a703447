"""What an experiment config asks of the way its trials run, and what a
cluster cannot give it: the keys only a container runtime honours (an agent
that runs trials as processes ignores them) and those only Determined on
Kubernetes or an HPC launcher honours (no agent here does). Pure; the
gateway warns at `det experiment create` (from its read models), the agent
writes the same words at the top of the trial's log (`services.agent.notices`).

Every function reads the stored, fully defaulted config (`to_json_dict()`):
a key counts as set when its value is neither null, false nor empty.
"""

from collections.abc import Mapping
from typing import Any

# How an agent runs allocations (AgentRegistered.runtime; "" is a registration
# from before runtimes, which ran them as processes).
PROCESS = "process"
DOCKER = "docker"
RUNTIMES = (PROCESS, DOCKER)

# What only a container honours, in the order the warnings name them.
CONTAINER_KEYS = (
    "environment.image",
    "environment.force_pull_image",
    "environment.registry_auth",
    "environment.add_capabilities",
    "environment.drop_capabilities",
    "bind_mounts",
    "resources.shm_size",
    "resources.devices",
)

# What only another kind of cluster honours: the key -> who.
ELSEWHERE_KEYS = {
    "environment.pod_spec": "Determined on Kubernetes",
    "slurm": "Determined on a Slurm cluster",
    "pbs": "Determined on a PBS cluster",
}

_HOW_TO_CONTAIN = "cluster-up --runtime docker runs them in containers"


def runtime_of(registered: str) -> str:
    """The runtime an agent registered with ("" is a process agent's)."""
    return registered or PROCESS


def set_keys(config: Mapping[str, Any], keys: tuple[str, ...]) -> list[str]:
    """Those of the dotted `keys` that `config` sets."""
    return [key for key in keys if _value(config, key)]


def unused_in_processes(config: Mapping[str, Any], who: str) -> list[str]:
    """One line per container-only key the config sets, saying that `who`
    (e.g. "the agents of pool 'default' run", "this agent runs") runs trials
    as processes."""
    return [
        f"{_named(config, key)} is not used: {who} trials as processes ({_HOW_TO_CONTAIN})"
        for key in set_keys(config, CONTAINER_KEYS)
    ]


def unused_anywhere_here(config: Mapping[str, Any]) -> list[str]:
    """One line per key only another kind of cluster honours."""
    return [
        f"{key} is not used: only {ELSEWHERE_KEYS[key]} honours it"
        for key in set_keys(config, tuple(ELSEWHERE_KEYS))
    ]


def _value(config: Mapping[str, Any], dotted: str) -> Any:
    value: Any = config
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


def _named(config: Mapping[str, Any], key: str) -> str:
    """The key, and the image it names for `environment.image`."""
    if key != "environment.image":
        return key
    image = _value(config, key)
    if isinstance(image, Mapping):
        named = ", ".join(f"{kind}: {name!r}" for kind, name in image.items() if name)
        return f"{key} ({named})"
    return f"{key} {image!r}"
