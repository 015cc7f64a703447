"""How a trial's entrypoint is run: its command line and the variables the
config adds to its environment. One definition for the agent
(`services/agent/launch.py`) and the CLI's local test mode, so that a local
test run starts the entrypoint exactly as a cluster would. Standard library
only: the CLI imports it."""

import re
from collections.abc import Mapping
from typing import Any, TypeVar

STARTUP_HOOK = "startup-hook.sh"
# `model_def:TrialClass` (or `pkg.mod:Outer.Inner`): a legacy Trial class rather than a command.
LEGACY_TRIAL_ENTRYPOINT = re.compile(r"^\w+(\.\w+)*:\w+(\.\w+)*$", re.ASCII)
# What a legacy Trial class runs under, as Determined 0.38 rewrites it: the torch launcher
# turns `--trial` into `python3 -m determined.exec.harness module:Class` for each worker.
LEGACY_TRIAL_LAUNCHER = "python3 -m determined.launch.torch_distributed -- --trial"

# Set (to "1") in a `det experiment create --test-mode` trial's environment: the Trainer then
# trains and validates one batch whatever max_length the script passes.
TEST_MODE_VARIABLE = "DET_TEST_MODE"

E = TypeVar("E")


class EntrypointError(ValueError):
    """An entrypoint that is neither a command string nor a non-empty list of strings."""


def is_legacy_trial(entrypoint: object) -> bool:
    return isinstance(entrypoint, str) and bool(LEGACY_TRIAL_ENTRYPOINT.match(entrypoint.strip()))


def launch_entrypoint(entrypoint: E) -> E | str:
    """The entrypoint a trial actually runs: a legacy `module:Class` one under the torch
    launcher, anything else as written."""
    if is_legacy_trial(entrypoint):
        return f"{LEGACY_TRIAL_LAUNCHER} {str(entrypoint).strip()}"
    return entrypoint


def entrypoint_argv(entrypoint: object, *, startup_hook: bool) -> list[str]:
    """The command to exec: a string runs under `sh -c`, a list is exec'd as
    is; a startup hook is sourced first, in the same shell."""
    if isinstance(entrypoint, str):
        argv = ["sh", "-c", entrypoint]
    elif isinstance(entrypoint, list) and entrypoint and all(isinstance(a, str) for a in entrypoint):
        argv = list(entrypoint)
    else:
        raise EntrypointError(f"the experiment has no runnable entrypoint: {entrypoint!r}")
    if startup_hook:
        return ["bash", "-c", f'set -e; source ./{STARTUP_HOOK}; exec "$@"', "bash", *argv]
    return argv


def configured_variables(config: Mapping[str, Any], slot_type: str) -> dict[str, str]:
    """The config's `environment.environment_variables`: a list of NAME=VALUE,
    or a map of such lists by slot type (cpu / cuda)."""
    variables = (config.get("environment") or {}).get("environment_variables") or []
    if isinstance(variables, Mapping):
        variables = variables.get(slot_type) or []
    pairs = (str(item).partition("=") for item in variables)
    return {name: value for name, sep, value in pairs if name and sep}


def with_variable(config: Mapping[str, Any], name: str, value: str) -> dict[str, Any]:
    """A copy of `config.environment` with NAME=VALUE added to its environment variables,
    for every slot type when they are given per slot type."""
    environment = dict(config.get("environment") or {})
    variables = environment.get("environment_variables") or []
    pair = f"{name}={value}"
    if isinstance(variables, Mapping):
        environment["environment_variables"] = {
            slot_type: [*(listed or []), pair] for slot_type, listed in variables.items()
        }
    else:
        environment["environment_variables"] = [*variables, pair]
    return environment
