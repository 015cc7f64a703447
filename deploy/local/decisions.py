"""The supervisor's decisions, with no I/O and no clock (`now` is passed in):
what a part's exit means, how long to wait before starting it again, which
parts to start or kill now, and what `cluster-up` does with what it finds.

A part's life: stopped -> starting (spawned, not ready yet) -> running (ready)
-> on an exit nobody asked for: backoff (restarts + 1, last_error says why)
-> starting again once the backoff has passed. An exit that was asked for
(restart-service, stop-service, the supervisor stopping) counts nothing.
"""

import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import IntEnum
from typing import Literal

PARTS = ("nats-server", "postgres", "gateway", "searcher", "scheduler", "checkpoint", "agent")
SERVERS = ("nats-server", "postgres")
SERVICES = PARTS[2:]
# The parts of a cluster before its agents (each agent is a part of its own).
CORE_PARTS = PARTS[:-1]
# A replay's (det deploy local replay): the servers and a gateway that only reads.
REPLAY_PARTS = (*SERVERS, "gateway")

FIRST_BACKOFF_S = 0.5
MAX_BACKOFF_S = 30.0
# A part that ran this long before it exited starts again after FIRST_BACKOFF_S.
STABLE_AFTER_S = 60.0
# How long a part gets to stop after its stop signal before its process group is killed.
STOP_DEADLINE_S = 20.0

State = Literal["running", "starting", "backoff", "stopped"]
# Why the supervisor asked a part to stop: to start it again at once, or to hold it down.
StopReason = Literal["", "restart", "hold"]
Action = Literal["restart", "stop", "start"]


@dataclass(frozen=True)
class Part:
    name: str
    state: State = "stopped"
    pid: int = 0
    restarts: int = 0
    last_error: str = ""
    started_at: float = 0.0
    # The wait before the latest automatic restart (0: it never crashed).
    backoff_s: float = 0.0
    # In backoff: when it is started again.
    restart_at: float = 0.0
    # Held down by stop-service: not started until asked to.
    held: bool = False
    # Set when the supervisor sends its stop signal: what follows the exit, and
    # when its process group is killed if it has not exited by then.
    stop_reason: StopReason = ""
    stop_deadline: float = 0.0


def part_names(
    agent_parts: Sequence[str] = ("agent",), *, agents_only: bool = False, replay: bool = False
) -> tuple[str, ...]:
    """The parts of a cluster, in start order: the servers, the services, then
    one part per agent. `agents_only`: a folder that runs only agents, for a
    cluster elsewhere (det deploy local agent-up --master-host); `replay`: a
    replay's (REPLAY_PARTS)."""
    if replay:
        return REPLAY_PARTS
    return tuple(agent_parts) if agents_only else (*CORE_PARTS, *agent_parts)


def initial_parts(names: Sequence[str] = PARTS) -> tuple[Part, ...]:
    return tuple(Part(name) for name in names)


def requirements(name: str) -> tuple[str, ...]:
    """The parts that must be running before `name` is first started: the
    start order nats-server, postgres, then the services (agents included).
    A requirement the cluster does not run here is none (see to_start)."""
    if name in SERVERS:
        return SERVERS[: SERVERS.index(name)]
    return SERVERS


def next_backoff(previous_s: float, ran_for_s: float) -> float:
    """0.5 s after the first crash, doubling up to 30 s while the part keeps
    crashing; back to 0.5 s once it had run for a minute."""
    if previous_s < FIRST_BACKOFF_S or ran_for_s >= STABLE_AFTER_S:
        return FIRST_BACKOFF_S
    return min(previous_s * 2, MAX_BACKOFF_S)


def started(part: Part, pid: int, now: float) -> Part:
    return replace(part, state="starting", pid=pid, started_at=now, stop_reason="", stop_deadline=0.0)


def became_ready(part: Part) -> Part:
    return replace(part, state="running") if part.state == "starting" else part


def failed_to_start(part: Part, now: float, why: str) -> Part:
    """Spawning it raised (e.g. initdb failed): counted as a crash."""
    return exited(replace(part, started_at=now), now, why, shutting_down=False)


def exited(part: Part, now: float, why: str, *, shutting_down: bool) -> Part:
    """Its process ended. `why`: exit status or signal and the end of its log."""
    if shutting_down or part.stop_reason == "hold":
        held = part.held or part.stop_reason == "hold"
        return replace(part, state="stopped", pid=0, held=held, stop_reason="", stop_deadline=0.0)
    if part.stop_reason == "restart":
        return replace(part, state="stopped", pid=0, held=False, stop_reason="", stop_deadline=0.0)
    backoff = next_backoff(part.backoff_s, now - part.started_at)
    return replace(
        part,
        state="backoff",
        pid=0,
        restarts=part.restarts + 1,
        last_error=why,
        backoff_s=backoff,
        restart_at=now + backoff,
        stop_reason="",
        stop_deadline=0.0,
    )


def steady(parts: Sequence[Part]) -> bool:
    """Nothing on its way anywhere: every part running (no stop asked) or held stopped. Only a
    part's exit, a request or the supervisor's own stop changes that; no clock does."""
    return all(
        (part.state == "running" and not part.stop_reason) or (part.state == "stopped" and part.held)
        for part in parts
    )


def exit_reason(returncode: int) -> str:
    """How a process ended, from Popen's returncode (negative: a signal)."""
    if returncode >= 0:
        return f"exited with status {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = "unknown signal"
    return f"killed by signal {-returncode} ({name})"


def requested(part: Part, action: Action, now: float) -> tuple[Part, bool]:
    """What an operator's request does to the part, and whether the shell must
    now send its process the stop signal."""
    if part.pid and part.stop_reason:  # already stopping: the latest request says what follows
        return replace(part, stop_reason="hold" if action == "stop" else "restart"), False
    if action == "start":
        return _start_now(replace(part, held=False)), False
    if part.pid:
        return asked_to_stop(part, "restart" if action == "restart" else "hold", now), True
    if action == "restart":
        return _start_now(replace(part, held=False)), False
    return replace(part, state="stopped", held=True), False


def asked_to_stop(part: Part, reason: StopReason, now: float) -> Part:
    """Its stop signal is being sent; past the deadline its process group is killed."""
    return replace(part, stop_reason=reason, stop_deadline=now + STOP_DEADLINE_S)


def _start_now(part: Part) -> Part:
    """Skips what is left of a backoff; a stopped part is started by to_start."""
    return replace(part, restart_at=0.0) if part.state == "backoff" else part


def to_start(parts: Sequence[Part], now: float, *, shutting_down: bool) -> list[str]:
    """The parts to spawn now, in start order."""
    if shutting_down:
        return []
    running = {part.name for part in parts if part.state == "running"}
    here = {part.name for part in parts}
    return [
        part.name
        for part in parts
        if (part.state == "backoff" and part.restart_at <= now)
        or (part.state == "stopped" and not part.held and set(requirements(part.name)) & here <= running)
    ]


def to_kill(parts: Sequence[Part], now: float) -> list[str]:
    """Parts that did not stop within STOP_DEADLINE_S of their stop signal."""
    return [part.name for part in parts if part.pid and part.stop_reason and part.stop_deadline <= now]


def next_to_stop(parts: Sequence[Part]) -> str | None:
    """While the supervisor shuts down, one part at a time in reverse start
    order: services first (the agent first of all: it stops its trials while
    the gateway still takes their last reports), then postgres and nats-server.
    None while a part is still stopping, or once none has a process."""
    if any(part.pid and part.stop_reason for part in parts):
        return None
    return next((part.name for part in reversed(parts) if part.pid), None)


def shut_down(part: Part) -> Part:
    """A part with no process once the supervisor shuts down (e.g. in backoff)."""
    return part if part.pid else replace(part, state="stopped", stop_reason="", stop_deadline=0.0)


# -- what cluster-up does ---------------------------------------------------------------


class UpOutcome(IntEnum):
    """cluster-up's exit status: what it did."""

    STARTED = 0
    FAILED = 1
    ALREADY_RUNNING = 3
    REPAIRED = 4


@dataclass(frozen=True)
class UpPlan:
    # "start": a new cluster; "wait": the supervisor runs every part (or is
    # starting them); "start-parts": ask the supervisor to start `parts` now;
    # "replace-supervisor": the supervisor is gone, kill what it left, start anew.
    action: Literal["start", "wait", "start-parts", "replace-supervisor"]
    parts: tuple[str, ...] = ()

    @property
    def outcome(self) -> UpOutcome:
        return {
            "start": UpOutcome.STARTED,
            "wait": UpOutcome.ALREADY_RUNNING,
        }.get(self.action, UpOutcome.REPAIRED)


def plan_cluster_up(
    *, recorded: bool, supervisor_alive: bool, leftovers_alive: bool, states: Mapping[str, str]
) -> UpPlan:
    """`recorded`: run/cluster.json exists; `leftovers_alive`: a process it
    records still runs; `states`: each part's state in the status file. A
    running supervisor starts a part in backoff or held down at once when asked."""
    if not recorded or (not supervisor_alive and not leftovers_alive):
        return UpPlan("start")
    if not supervisor_alive:
        return UpPlan("replace-supervisor")
    down = tuple(name for name, state in states.items() if state in ("backoff", "stopped"))
    return UpPlan("start-parts", down) if down else UpPlan("wait")


def startup_failure(restarts: Mapping[str, int], restarts_before: Mapping[str, int]) -> str | None:
    """While cluster-up waits for the parts to be ready: the first part (in
    the order of `restarts`) that crashed since it began waiting, if any."""
    return next((name for name, count in restarts.items() if count > restarts_before.get(name, 0)), None)
