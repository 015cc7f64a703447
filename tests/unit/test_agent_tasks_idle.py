"""A notebook's idle_timeout: when it was last active, and when it has been
idle too long (pure decisions, every idle type)."""

import pytest

from services.agent.idle import (
    ACTIVITY,
    KERNEL_CONNECTIONS,
    KERNELS_OR_TERMINALS,
    IdleSettings,
    Observation,
    idle_reason,
    idle_settings,
    last_active_s,
    observation,
)

NOW = 1_000_000.0
QUIET = 999_000.0  # Jupyter's last activity, long ago


def seen(kernels: int = 0, busy: int = 0, connections: int = 0, terminals: int = 0) -> Observation:
    return Observation(kernels, busy, connections, terminals, QUIET)


# -- the config ----------------------------------------------------------------------------


def test_no_idle_timeout_means_never() -> None:
    assert idle_settings({}) is None
    assert idle_settings({"idle_timeout": None}) is None


def test_the_timeout_is_a_duration_and_the_type_defaults() -> None:
    assert idle_settings({"idle_timeout": "30s"}) == IdleSettings(30.0, KERNELS_OR_TERMINALS)
    assert idle_settings({"idle_timeout": "1h30m", "notebook_idle_type": "activity"}) == IdleSettings(
        5400.0, ACTIVITY
    )


@pytest.mark.parametrize("bad", ["", "soon", "0s", "30", 30, "-5s"])
def test_a_timeout_that_is_no_positive_duration_is_ignored(bad: object) -> None:
    assert idle_settings({"idle_timeout": bad}) is None


def test_an_unknown_idle_type_reads_as_the_default() -> None:
    assert idle_settings({"idle_timeout": "1m", "notebook_idle_type": "x"}) == IdleSettings(60.0)


def test_it_polls_often_enough_for_short_timeouts() -> None:
    assert IdleSettings(3600.0).poll_s == 5.0
    assert IdleSettings(4.0).poll_s == 1.0
    assert IdleSettings(0.1).poll_s == 0.5


# -- when it was last active ---------------------------------------------------------------


@pytest.mark.parametrize(
    "observed, idle_type, active",
    [
        (seen(), KERNELS_OR_TERMINALS, False),
        (seen(kernels=1), KERNELS_OR_TERMINALS, True),
        (seen(terminals=1), KERNELS_OR_TERMINALS, True),
        (seen(kernels=1), KERNEL_CONNECTIONS, False),
        (seen(kernels=1, connections=2), KERNEL_CONNECTIONS, True),
        (seen(terminals=1), KERNEL_CONNECTIONS, False),
        (seen(kernels=1, connections=1, terminals=1), ACTIVITY, False),
        (seen(kernels=1, busy=1), ACTIVITY, True),
        (seen(kernels=1, busy=1), KERNEL_CONNECTIONS, True),
    ],
)
def test_what_counts_as_active_by_idle_type(observed: Observation, idle_type: str, active: bool) -> None:
    assert last_active_s(observed, idle_type, NOW) == (NOW if active else QUIET)


def test_idle_past_the_timeout_is_a_kill_with_its_reason() -> None:
    settings = IdleSettings(30.0)
    assert idle_reason(NOW - 30.0, NOW, settings) == ""
    assert idle_reason(NOW - 30.5, NOW, settings) == "idle_timeout: no activity for 30s"
    assert idle_reason(NOW - 9000, NOW, IdleSettings(5400.0)) == "idle_timeout: no activity for 5400s"


# -- reading JupyterLab's answers ----------------------------------------------------------


def test_jupyters_answers_are_read() -> None:
    status = {"last_activity": "2026-11-27T17:06:12.722453Z", "kernels": 2, "connections": 1}
    kernels = [{"execution_state": "busy", "connections": 1}, {"execution_state": "idle", "connections": 0}]
    read = observation(status, kernels, [{"name": "1"}])
    assert (read.kernels, read.busy_kernels, read.connections, read.terminals) == (2, 1, 1, 1)
    assert read.last_activity_s == pytest.approx(1_795_799_172.722453)


@pytest.mark.parametrize(
    "status, kernels",
    [({}, []), ({"last_activity": "x"}, []), ({"last_activity": "2026-01-01T00:00:00Z"}, [1])],
)
def test_answers_that_are_not_jupyters_are_refused(status: dict[str, object], kernels: list[object]) -> None:
    with pytest.raises(ValueError):
        observation(status, kernels, [])
