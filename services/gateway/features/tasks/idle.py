"""A TensorBoard's idle_timeout: the gateway stops a TensorBoard nobody has
opened through its proxy for that long (AllocationKillRequested, reason
"idle_timeout: ...").

A TensorBoard has no activity to ask for (JupyterLab has; the agent watches
notebooks, services/agent/idle.py), and every use of it passes through
/proxy/<task id>/, so the proxy is where it is seen used, as in Determined,
whose master stops TensorBoards on proxy inactivity. An open WebSocket is
use for as long as it stays open. What the proxy saw lives in the gateway's
memory only: after a gateway restart a TensorBoard's idle time counts from
then, so it may live longer than its timeout, never shorter.
"""

import collections
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from determined.common.expconf import duration_seconds
from determined.common.states import TaskState, TaskType
from determined.proto import api_pb2, events_pb2
from services.common.envelope import Append, aggregate

# How often the gateway looks for idle TensorBoards (at most; more often for a
# timeout shorter than a few looks).
CHECK_S = 5.0
MIN_CHECK_S = 0.5
NS = 1_000_000_000
# Who appends an idle TensorBoard's kill.
ACTOR = "service:gateway"


@dataclass
class ProxyActivity:
    """When each task was last used through the proxy, and its open WebSockets."""

    last_used_ns: dict[str, int] = field(default_factory=dict)
    open_connections: collections.Counter[str] = field(default_factory=collections.Counter)

    def used(self, task_id: str, now_ns: int) -> None:
        self.last_used_ns[task_id] = now_ns

    def opened(self, task_id: str, now_ns: int) -> None:
        self.open_connections[task_id] += 1
        self.used(task_id, now_ns)

    def closed(self, task_id: str, now_ns: int) -> None:
        self.open_connections[task_id] -= 1
        if self.open_connections[task_id] <= 0:
            del self.open_connections[task_id]
        self.used(task_id, now_ns)


@dataclass(frozen=True)
class IdleTimeout:
    """A running TensorBoard with an idle_timeout."""

    task_id: str
    allocation_id: str
    timeout_s: float
    started_ns: int


def idle_timeouts(tasks: Iterable[api_pb2.Task]) -> list[IdleTimeout]:
    """The running TensorBoards whose config sets an idle_timeout."""
    return [
        IdleTimeout(task.id, task.allocation_id, timeout_s, task.start_time_ns)
        for task in tasks
        if task.task_type == TaskType.TENSORBOARD
        and task.state == TaskState.RUNNING
        and (timeout_s := _timeout_s(task.config_json)) is not None
    ]


def check_every_s(timeouts: Iterable[IdleTimeout]) -> float:
    """How long until the next look: a quarter of the shortest timeout, within bounds."""
    return min([CHECK_S, *(max(timeout.timeout_s / 4, MIN_CHECK_S) for timeout in timeouts)])


def idle_kills(
    timeouts: Iterable[IdleTimeout], activity: ProxyActivity, watching_since_ns: int, now_ns: int
) -> list[Append]:
    """The kill of each TensorBoard unused for its timeout: no open WebSocket and
    no request since it started, since this gateway started watching, or since
    its last use, whichever is latest."""
    return [
        _kill(timeout)
        for timeout in timeouts
        if not activity.open_connections.get(timeout.task_id)
        and now_ns - _last_use_ns(timeout, activity.last_used_ns, watching_since_ns) >= timeout.timeout_s * NS
    ]


def _last_use_ns(timeout: IdleTimeout, last_used_ns: Mapping[str, int], watching_since_ns: int) -> int:
    return max(timeout.started_ns, watching_since_ns, last_used_ns.get(timeout.task_id, 0))


def _kill(timeout: IdleTimeout) -> Append:
    event = events_pb2.AllocationKillRequested(
        allocation_id=timeout.allocation_id,
        task_id=timeout.task_id,
        reason=f"idle_timeout: nobody opened it through the gateway for {timeout.timeout_s:g}s",
    )
    # As the agent's for an idle notebook (services/agent/core.py): one idle kill per allocation.
    return Append(
        aggregate("allocation", timeout.allocation_id), event, f"allocation-kill-idle-{timeout.allocation_id}"
    )


def _timeout_s(config_json: str) -> float | None:
    try:
        setting = json.loads(config_json or "{}").get("idle_timeout")
        return None if setting is None else duration_seconds(setting)
    except (ValueError, AttributeError, TypeError):
        return None  # a stored config is checked at launch; one unreadable here is not stopped
