"""The lines an agent writes at the top of a trial's log when its runtime
cannot honour what the trial's config asks (the words `det experiment
create` warns with: `services.common.trial_runtime`). Pure."""

from typing import Any

from services.common.trial_runtime import PROCESS, runtime_of, unused_anywhere_here, unused_in_processes


def runtime_notices(config: dict[str, Any], runtime: str) -> list[str]:
    """`config`: the trial's stored experiment config; `runtime`: how this
    agent runs allocations ("process" or "docker"; "" is "process")."""
    notices = unused_in_processes(config, "this agent runs") if runtime_of(runtime) == PROCESS else []
    return notices + unused_anywhere_here(config)
