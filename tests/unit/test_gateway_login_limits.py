"""The rules that slow down password guessing (login_limits.py), on a clock the test moves."""

import pytest

from services.gateway.features.users import login_limits
from services.gateway.features.users.login_limits import (
    FREE_FAILURES,
    MAX_DELAY_S,
    LoginThrottle,
    LoginThrottledError,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def failing(throttle: LoginThrottle, clock: Clock, times: int, username: str = "admin") -> None:
    """`times` wrong passwords from 10.0.0.5, each after the wait the one before set."""
    for _ in range(times):
        throttle.begin(username, "10.0.0.5")  # never succeeded: a wrong password
        clock.now += MAX_DELAY_S
    clock.now -= MAX_DELAY_S  # the last one a moment ago


def test_the_delay_doubles_after_the_free_failures_and_is_capped() -> None:
    assert [login_limits.delay_s(n) for n in range(FREE_FAILURES)] == [0.0] * FREE_FAILURES
    assert [login_limits.delay_s(FREE_FAILURES + n) for n in range(4)] == [1.0, 2.0, 4.0, 8.0]
    assert login_limits.delay_s(FREE_FAILURES + 40) == login_limits.delay_s(10**9) == MAX_DELAY_S


def test_an_attempt_during_the_wait_is_refused_and_counts_nothing() -> None:
    clock = Clock()
    throttle = LoginThrottle(clock)
    failing(throttle, clock, FREE_FAILURES)
    with pytest.raises(
        LoginThrottledError, match="too many failed logins for user admin: wait 1 s"
    ) as raised:
        throttle.begin("admin", "10.0.0.5")
    assert raised.value.code.name == "RESOURCE_EXHAUSTED"
    for _ in range(30):  # hammering does not lengthen the wait
        with pytest.raises(LoginThrottledError):
            throttle.begin("admin", "10.0.0.5")
    assert throttle.failures("admin", "10.0.0.5") == FREE_FAILURES
    clock.now += 1.0
    throttle.begin("admin", "10.0.0.5")  # allowed after the wait (and failed again)
    with pytest.raises(LoginThrottledError, match="wait 2 s"):
        throttle.begin("admin", "10.0.0.5")


def test_the_right_password_after_the_wait_forgets_the_users_failures() -> None:
    clock = Clock()
    throttle = LoginThrottle(clock)
    failing(throttle, clock, FREE_FAILURES + 3)
    clock.now += 8.0
    throttle.begin("admin", "10.0.0.9")  # the address differs: only the user's failures count
    throttle.succeeded("admin", "10.0.0.9")
    throttle.begin("admin", "10.0.0.9")  # the user may try again at once
    throttle.succeeded("admin", "10.0.0.9")


def test_failures_count_per_address_over_every_username() -> None:
    clock = Clock()
    throttle = LoginThrottle(clock)
    for n in range(FREE_FAILURES):
        throttle.begin(f"user{n}", "10.0.0.5")
    with pytest.raises(LoginThrottledError, match="for address 10.0.0.5: wait 1 s"):
        throttle.begin("someone-else", "10.0.0.5")
    throttle.begin("someone-else", "10.0.0.6")  # another address is not slowed


def test_an_address_is_not_washed_clean_by_its_own_good_logins() -> None:
    clock = Clock()
    throttle = LoginThrottle(clock)
    failing(throttle, clock, FREE_FAILURES - 1, username="admin")
    throttle.begin("mallory", "10.0.0.5")
    throttle.succeeded("mallory", "10.0.0.5")
    throttle.begin("bob", "10.0.0.5")  # the fifth failure of the address
    with pytest.raises(LoginThrottledError, match="address 10.0.0.5"):
        throttle.begin("carol", "10.0.0.5")


def test_failures_are_forgotten_after_a_quiet_while_so_no_lockout_lasts() -> None:
    clock = Clock()
    throttle = LoginThrottle(clock)
    failing(throttle, clock, FREE_FAILURES + 20)
    clock.now += MAX_DELAY_S
    throttle.begin("admin", "10.0.0.5")  # the longest wait is MAX_DELAY_S, however many failures
    clock.now += login_limits.FORGET_AFTER_S
    assert throttle.failures("admin", "10.0.0.5") == 0
    failing(throttle, clock, FREE_FAILURES)


def test_the_table_stays_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(login_limits, "MAX_KEYS", 4)
    throttle = LoginThrottle(Clock())
    for n in range(10):
        throttle.begin(f"u{n}" + "x" * 1000, f"a{n}")
    assert len(throttle._failures) == 4
    assert all(len(name) <= login_limits.MAX_USERNAME_CHARS for _, name in throttle._failures)
