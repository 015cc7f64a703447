"""A notebook's idle_timeout: the agent stops a notebook nobody has used for
that long (AllocationKillRequested, reason "idle_timeout: ...").

Every few seconds the agent asks JupyterLab (with the notebook's token, and
`no_track_activity` so that asking is no activity) for its status (its last
activity: API requests, which an open JupyterLab page keeps making, kernel
and terminal activity), its kernels and its terminals. When it was last
active is then decided here, by the config's `notebook_idle_type`, as
Determined reads it:

- `kernels_or_terminals` (the default): active while any kernel or terminal
  is open (a user shuts them down to let it time out);
- `kernel_connections`: active while a kernel has a connection (an open
  notebook tab);
- `activity`: only what Jupyter counts as activity.

Whatever the type, a kernel that is busy (a long cell runs) is active, and a
poll that gets no answer counts as active: a notebook is never stopped for
what the agent could not see. A TensorBoard's idle_timeout is the gateway's
(services/gateway/features/tasks/idle.py): only its proxy sees one used.
"""

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx

from determined.common.expconf import duration_seconds

KERNELS_OR_TERMINALS = "kernels_or_terminals"
KERNEL_CONNECTIONS = "kernel_connections"
ACTIVITY = "activity"
IDLE_TYPES = (KERNELS_OR_TERMINALS, KERNEL_CONNECTIONS, ACTIVITY)
# How often the agent asks; more often for a timeout shorter than a few polls.
POLL_S = 5.0
MIN_POLL_S = 0.5
REQUEST_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class IdleSettings:
    timeout_s: float
    idle_type: str = KERNELS_OR_TERMINALS

    @property
    def poll_s(self) -> float:
        return min(POLL_S, max(self.timeout_s / 4, MIN_POLL_S))


@dataclass(frozen=True)
class Observation:
    """What one poll of JupyterLab saw."""

    kernels: int
    busy_kernels: int
    connections: int
    terminals: int
    # Jupyter's newest activity (seconds since the epoch).
    last_activity_s: float


def idle_settings(config: Mapping[str, Any]) -> IdleSettings | None:
    """The config's idle_timeout and notebook_idle_type; None: it never times
    out (no idle_timeout, or one that is not a positive duration: the gateway
    checks the config, so a bad one here is not the agent's to refuse)."""
    try:
        timeout = duration_seconds(str(config.get("idle_timeout") or ""))
    except ValueError:
        return None
    if timeout <= 0:
        return None
    idle_type = config.get("notebook_idle_type") or KERNELS_OR_TERMINALS
    return IdleSettings(timeout, idle_type if idle_type in IDLE_TYPES else KERNELS_OR_TERMINALS)


def observation(status: Mapping[str, Any], kernels: list[Any], terminals: list[Any]) -> Observation:
    """A poll's answers (`api/status`, `api/kernels`, `api/terminals`) read;
    ValueError when they are not JupyterLab's shapes."""
    try:
        last = datetime.fromisoformat(str(status["last_activity"])).timestamp()
        busy = sum(1 for kernel in kernels if kernel.get("execution_state") == "busy")
        connections = sum(int(kernel.get("connections") or 0) for kernel in kernels)
    except (KeyError, TypeError, AttributeError) as error:
        raise ValueError(f"not JupyterLab's status: {error!r}") from None
    return Observation(len(kernels), busy, connections, len(terminals), last)


def last_active_s(seen: Observation, idle_type: str, now_s: float) -> float:
    """When the notebook was last active, as one poll at `now_s` shows it."""
    active = seen.busy_kernels > 0
    if idle_type == KERNELS_OR_TERMINALS:
        active = active or seen.kernels > 0 or seen.terminals > 0
    elif idle_type == KERNEL_CONNECTIONS:
        active = active or seen.connections > 0
    return now_s if active else seen.last_activity_s


def idle_reason(last_active: float, now_s: float, settings: IdleSettings) -> str:
    """The kill's reason once the notebook was idle longer than its
    idle_timeout; "" until then."""
    if now_s - last_active <= settings.timeout_s:
        return ""
    return f"idle_timeout: no activity for {settings.timeout_s:g}s"


async def watch_idle(
    base_url: str, token: str, settings: IdleSettings, on_idle: Callable[[str], Awaitable[None]]
) -> None:
    """Polls the notebook at `base_url` (its proxy prefix included) until it
    was idle too long, then calls `on_idle` with the reason, and returns."""
    headers = {"Authorization": f"token {token}"}
    last_active = time.time()
    async with httpx.AsyncClient(headers=headers, timeout=REQUEST_TIMEOUT_S, trust_env=False) as client:
        while True:
            await asyncio.sleep(settings.poll_s)
            now = time.time()
            try:
                seen = await _poll(client, base_url)
            except (httpx.HTTPError, ValueError):
                seen = None  # not seen: counted as active
            active = now if seen is None else last_active_s(seen, settings.idle_type, now)
            last_active = max(last_active, active)
            reason = idle_reason(last_active, now, settings)
            if reason:
                await on_idle(reason)
                return


async def _poll(client: httpx.AsyncClient, base_url: str) -> Observation:
    answers: list[Any] = []
    for path in ("api/status", "api/kernels", "api/terminals"):
        response = await client.get(f"{base_url}{path}", params={"no_track_activity": "1"})
        if path == "api/terminals" and response.status_code == 404:  # terminals turned off
            answers.append([])
            continue
        response.raise_for_status()
        answers.append(response.json())
    status, kernels, terminals = answers
    if not isinstance(status, dict) or not isinstance(kernels, list) or not isinstance(terminals, list):
        raise ValueError("not JupyterLab's status")
    return observation(status, kernels, terminals)
