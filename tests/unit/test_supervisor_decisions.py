"""The supervisor's decisions (deploy/local/decisions.py): what an exit means,
the backoff, what to start, stop or kill, and what cluster-up does."""

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from deploy.local.decisions import (
    FIRST_BACKOFF_S,
    MAX_BACKOFF_S,
    PARTS,
    SERVICES,
    STABLE_AFTER_S,
    STOP_DEADLINE_S,
    Part,
    UpOutcome,
    UpPlan,
    asked_to_stop,
    became_ready,
    exit_reason,
    exited,
    failed_to_start,
    initial_parts,
    next_backoff,
    next_to_stop,
    plan_cluster_up,
    requested,
    requirements,
    shut_down,
    started,
    startup_failure,
    steady,
    to_kill,
    to_start,
)

T = 1000.0


def running(name: str, pid: int = 10, **changes: object) -> Part:
    return replace(Part(name, state="running", pid=pid, started_at=T), **changes)  # type: ignore[arg-type]


def everything_running() -> list[Part]:
    return [running(name, pid=10 + index) for index, name in enumerate(PARTS)]


def with_part(parts: list[Part], part: Part) -> list[Part]:
    return [part if p.name == part.name else p for p in parts]


# -- backoff -------------------------------------------------------------------------------


def test_the_backoff_starts_at_half_a_second_and_doubles_up_to_30_s() -> None:
    waits = [FIRST_BACKOFF_S]
    for _ in range(10):
        waits.append(next_backoff(waits[-1], ran_for_s=1.0))
    assert waits == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0, 30.0, 30.0]


def test_the_backoff_starts_over_after_a_minute_of_running() -> None:
    assert next_backoff(16.0, ran_for_s=STABLE_AFTER_S) == FIRST_BACKOFF_S
    assert next_backoff(16.0, ran_for_s=STABLE_AFTER_S - 0.1) == 30.0
    assert next_backoff(0.0, ran_for_s=0.0) == FIRST_BACKOFF_S


@given(st.floats(0, 1e6), st.floats(0, 1e6))
def test_the_backoff_stays_between_its_bounds(previous: float, ran_for: float) -> None:
    assert FIRST_BACKOFF_S <= next_backoff(previous, ran_for) <= MAX_BACKOFF_S


# -- a part's life ---------------------------------------------------------------------------


def test_a_started_part_is_starting_until_ready() -> None:
    part = started(Part("gateway"), pid=42, now=T)
    assert (part.state, part.pid, part.started_at) == ("starting", 42, T)
    assert became_ready(part).state == "running"
    assert became_ready(Part("gateway", state="backoff")).state == "backoff"


def test_an_exit_nobody_asked_for_counts_a_restart_and_says_why() -> None:
    part = exited(
        running("searcher"), T + 5, "killed by signal 9 (SIGKILL)\nthe end of x", shutting_down=False
    )
    assert part.state == "backoff" and part.pid == 0
    assert part.restarts == 1 and part.last_error.startswith("killed by signal 9")
    assert (part.backoff_s, part.restart_at) == (FIRST_BACKOFF_S, T + 5 + FIRST_BACKOFF_S)


def test_a_part_that_keeps_crashing_waits_longer_each_time() -> None:
    part = running("agent")
    waits = []
    for attempt in range(4):
        part = exited(part, part.started_at + 1, "exited with status 1", shutting_down=False)
        waits.append(part.backoff_s)
        part = became_ready(started(part, pid=100 + attempt, now=part.restart_at))
    assert waits == [0.5, 1.0, 2.0, 4.0]
    assert part.restarts == 4
    part = exited(part, part.started_at + STABLE_AFTER_S, "exited with status 1", shutting_down=False)
    assert part.backoff_s == FIRST_BACKOFF_S


def test_a_part_that_cannot_be_spawned_counts_as_a_crash() -> None:
    part = failed_to_start(Part("postgres"), T, "could not start: initdb failed")
    assert (part.state, part.restarts, part.last_error) == ("backoff", 1, "could not start: initdb failed")


def test_an_exit_asked_for_by_restart_counts_nothing_and_starts_it_again() -> None:
    part = asked_to_stop(running("postgres", last_error="old", restarts=2), "restart", T)
    part = exited(part, T + 1, "exited with status 0", shutting_down=False)
    assert (part.state, part.pid, part.restarts, part.last_error, part.held) == (
        "stopped",
        0,
        2,
        "old",
        False,
    )
    assert to_start(with_part(everything_running(), part), T + 1, shutting_down=False) == ["postgres"]


def test_an_exit_asked_for_by_stop_holds_the_part_down() -> None:
    part = exited(asked_to_stop(running("gateway"), "hold", T), T + 1, "", shutting_down=False)
    assert (part.state, part.held, part.restarts) == ("stopped", True, 0)
    assert to_start(with_part(everything_running(), part), T + 100, shutting_down=False) == []


def test_exits_while_the_supervisor_shuts_down_count_nothing() -> None:
    part = exited(running("agent"), T + 1, "exited with status 1", shutting_down=True)
    assert (part.state, part.restarts, part.last_error) == ("stopped", 0, "")


@pytest.mark.parametrize(
    ("returncode", "reason"),
    [
        (0, "exited with status 0"),
        (1, "exited with status 1"),
        (-9, "killed by signal 9 (SIGKILL)"),
        (-15, "killed by signal 15 (SIGTERM)"),
        (-99, "killed by signal 99 (unknown signal)"),
    ],
)
def test_exit_reasons(returncode: int, reason: str) -> None:
    assert exit_reason(returncode) == reason


# -- requests -------------------------------------------------------------------------------


@pytest.mark.parametrize(("action", "reason"), [("restart", "restart"), ("stop", "hold")])
def test_restart_and_stop_of_a_live_part_send_its_stop_signal(action: str, reason: str) -> None:
    for state in ("running", "starting"):
        part, send = requested(running("nats-server", state=state), action, T)  # type: ignore[arg-type]
        assert send and part.stop_reason == reason and part.stop_deadline == T + STOP_DEADLINE_S


def test_start_of_a_live_part_changes_nothing() -> None:
    assert requested(running("gateway"), "start", T) == (running("gateway"), False)


@pytest.mark.parametrize(
    ("action", "reason"), [("restart", "restart"), ("start", "restart"), ("stop", "hold")]
)
def test_the_latest_request_to_a_stopping_part_says_what_follows(action: str, reason: str) -> None:
    stopping = asked_to_stop(running("gateway"), "hold" if action != "stop" else "restart", T)
    part, send = requested(stopping, action, T + 1)  # type: ignore[arg-type]
    assert not send and part.stop_reason == reason and part.stop_deadline == stopping.stop_deadline


@pytest.mark.parametrize("action", ["restart", "start"])
def test_restart_or_start_skip_a_backoff_and_end_a_hold(action: str) -> None:
    waiting = Part("searcher", state="backoff", restarts=3, restart_at=T + 30)
    part, send = requested(waiting, action, T)  # type: ignore[arg-type]
    assert not send and part.restarts == 3
    assert to_start(with_part(everything_running(), part), T, shutting_down=False) == ["searcher"]
    held = Part("searcher", held=True)
    part, send = requested(held, action, T)  # type: ignore[arg-type]
    assert not send and not part.held
    assert to_start(with_part(everything_running(), part), T, shutting_down=False) == ["searcher"]


@pytest.mark.parametrize("state", ["backoff", "stopped"])
def test_stop_of_a_part_without_a_process_holds_it(state: str) -> None:
    part, send = requested(Part("agent", state=state, restart_at=T), "stop", T)  # type: ignore[arg-type]
    assert not send and (part.state, part.held) == ("stopped", True)


# -- what to start and kill ----------------------------------------------------------------


def test_the_first_start_goes_nats_then_postgres_then_the_services() -> None:
    parts = list(initial_parts())
    assert to_start(parts, T, shutting_down=False) == ["nats-server"]
    parts = with_part(parts, started(parts[0], 1, T))
    assert to_start(parts, T, shutting_down=False) == []
    parts = with_part(parts, running("nats-server"))
    assert to_start(parts, T, shutting_down=False) == ["postgres"]
    parts = with_part(parts, running("postgres", pid=2))
    assert to_start(parts, T, shutting_down=False) == list(SERVICES)
    assert requirements("agent") == ("nats-server", "postgres") and requirements("nats-server") == ()


def test_a_part_in_backoff_starts_when_its_wait_is_over_even_if_a_server_is_down() -> None:
    parts = with_part(everything_running(), Part("nats-server", state="backoff", restart_at=T + 2))
    parts = with_part(parts, Part("gateway", state="backoff", restart_at=T + 1))
    assert to_start(parts, T, shutting_down=False) == []
    assert to_start(parts, T + 1, shutting_down=False) == ["gateway"]
    assert to_start(parts, T + 2, shutting_down=False) == ["nats-server", "gateway"]
    assert to_start(parts, T + 2, shutting_down=True) == []


def test_a_part_that_does_not_stop_in_time_is_killed() -> None:
    stopping = asked_to_stop(running("agent"), "hold", T)
    parts = with_part(everything_running(), stopping)
    assert to_kill(parts, T + STOP_DEADLINE_S - 1) == []
    assert to_kill(parts, T + STOP_DEADLINE_S) == ["agent"]


def test_shutdown_stops_one_part_at_a_time_services_first() -> None:
    parts = everything_running()
    order = []
    while (name := next_to_stop(parts)) is not None:
        order.append(name)
        stopping = asked_to_stop(next(p for p in parts if p.name == name), "hold", T)
        parts = with_part(parts, stopping)
        assert next_to_stop(parts) is None  # waits for it
        parts = with_part(parts, exited(stopping, T, "", shutting_down=True))
    assert order == list(reversed(PARTS))
    assert all(p.state == "stopped" for p in parts)


def test_shutdown_marks_parts_without_a_process_stopped() -> None:
    assert shut_down(Part("agent", state="backoff")).state == "stopped"
    assert shut_down(running("agent")) == running("agent")


# -- cluster-up -----------------------------------------------------------------------------


ALL_RUNNING = dict.fromkeys(PARTS, "running")


@pytest.mark.parametrize(
    ("recorded", "supervisor", "leftovers", "states", "plan"),
    [
        (False, False, False, {}, UpPlan("start")),
        (True, False, False, {}, UpPlan("start")),  # a cluster.json that outlived its cluster
        (True, False, True, ALL_RUNNING, UpPlan("replace-supervisor")),
        (True, True, True, ALL_RUNNING, UpPlan("wait")),
        (True, True, True, dict(ALL_RUNNING, gateway="starting"), UpPlan("wait")),
        (True, True, True, {}, UpPlan("wait")),  # its first status is not written yet
        (
            True,
            True,
            True,
            dict(ALL_RUNNING, agent="backoff", postgres="stopped"),
            UpPlan("start-parts", ("postgres", "agent")),
        ),
    ],
)
def test_what_cluster_up_does(
    recorded: bool, supervisor: bool, leftovers: bool, states: dict[str, str], plan: UpPlan
) -> None:
    assert (
        plan_cluster_up(
            recorded=recorded, supervisor_alive=supervisor, leftovers_alive=leftovers, states=states
        )
        == plan
    )


def test_cluster_up_exit_statuses_say_what_it_did() -> None:
    assert UpPlan("start").outcome == UpOutcome.STARTED
    assert UpPlan("wait").outcome == UpOutcome.ALREADY_RUNNING
    assert (
        UpPlan("start-parts", ("agent",)).outcome
        == UpPlan("replace-supervisor").outcome
        == UpOutcome.REPAIRED
    )
    assert [
        int(o) for o in (UpOutcome.STARTED, UpOutcome.FAILED, UpOutcome.ALREADY_RUNNING, UpOutcome.REPAIRED)
    ] == [0, 1, 3, 4]


def test_a_part_that_crashed_while_cluster_up_waits_is_its_failure() -> None:
    before = {"gateway": 1}
    assert startup_failure({"gateway": 1, "agent": 0}, before) is None
    assert startup_failure({"gateway": 1, "agent": 1}, before) == "agent"
    assert startup_failure({"postgres": 1, "agent": 1}, {}) == "postgres"


def test_a_cluster_is_steady_while_nothing_is_on_its_way_anywhere() -> None:
    running = tuple(became_ready(started(part, 10 + i, T)) for i, part in enumerate(initial_parts()))
    held, _ = requested(running[2], "stop", T)
    assert steady(running)
    assert steady((*running[:2], exited(held, T + 1, "", shutting_down=False), *running[3:]))
    for moving in (
        held,  # asked to stop, not stopped yet: its deadline may pass
        started(running[2], 99, T),
        exited(running[2], T + 1, "crash", shutting_down=False),  # in backoff
        Part("gateway"),  # stopped, to be started
    ):
        assert not steady((*running[:2], moving, *running[3:]))
