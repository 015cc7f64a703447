"""Slowing down password guessing: the pure rules of login attempts (no I/O;
the clock is passed in).

Every login attempt counts as a failure against its username and against the
client address it came from, until it succeeds (counted at the start, so that
a burst of parallel guesses is counted as it arrives). Once a username or an
address has FREE_FAILURES failures, its next attempt must wait BASE_DELAY_S,
doubling with each further failure, at most MAX_DELAY_S. An attempt made
during the wait is refused at once, without checking the password and
without counting: hammering does not lengthen the wait.

Nobody can lock a user out for good: the wait is capped, a key's failures
are forgotten FORGET_AFTER_S after its last one, and a login with the right
password after the wait forgets the username's failures (the address's keep
counting but for that attempt: an attacker's own account does not wash their
address clean). At most MAX_KEYS usernames and addresses are remembered; the
longest quiet ones are forgotten first.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass

from services.gateway.errors import ResourceExhaustedError

FREE_FAILURES = 5
BASE_DELAY_S = 1.0
MAX_DELAY_S = 60.0
FORGET_AFTER_S = 15 * 60.0
MAX_KEYS = 100_000
# Usernames have at most 128 characters (users.checked_username).
MAX_USERNAME_CHARS = 128

Clock = Callable[[], float]
# ("user", username) or ("address", client address).
Key = tuple[str, str]


class LoginThrottledError(ResourceExhaustedError):
    """Too many failed logins for a username or from an address: wait."""


@dataclass
class _Failures:
    count: int
    last_at: float


def delay_s(failures: int) -> float:
    """How long after its last failure a key with `failures` failures waits."""
    if failures < FREE_FAILURES:
        return 0.0
    return min(BASE_DELAY_S * 2.0 ** min(failures - FREE_FAILURES, 32), MAX_DELAY_S)


class LoginThrottle:
    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        # Insertion order is the order of their last failure: the oldest first.
        self._failures: dict[Key, _Failures] = {}

    def begin(self, username: str, address: str) -> None:
        """Counts a login attempt as failed until `succeeded`; LoginThrottledError
        (counting nothing) while the username or the address must wait."""
        now = self.clock()
        for key in _keys(username, address):
            wait = self._wait_s(key, now)
            if wait > 0:
                who = f"user {username}" if key[0] == "user" else f"address {address}"
                raise LoginThrottledError(
                    f"too many failed logins for {who}: wait {math.ceil(wait)} s before trying again"
                )
        for key in _keys(username, address):
            known = self._failures.pop(key, None)
            self._failures[key] = _Failures((known.count if known else 0) + 1, now)
        while len(self._failures) > MAX_KEYS:
            del self._failures[next(iter(self._failures))]

    def succeeded(self, username: str, address: str) -> None:
        """The attempt `begin` counted had the right password."""
        user, at = _keys(username, address)
        self._failures.pop(user, None)
        known = self._failures.get(at)
        if known is not None:
            known.count -= 1

    def failures(self, username: str, address: str) -> int:
        """The most failures either key has now (for the log)."""
        now = self.clock()
        return max(self._current(key, now) for key in _keys(username, address))

    def _wait_s(self, key: Key, now: float) -> float:
        known = self._failures.get(key)
        if known is None:
            return 0.0
        return max(0.0, known.last_at + delay_s(self._current(key, now)) - now)

    def _current(self, key: Key, now: float) -> int:
        known = self._failures.get(key)
        if known is None:
            return 0
        if now - known.last_at >= FORGET_AFTER_S:
            del self._failures[key]
            return 0
        return known.count


def _keys(username: str, address: str) -> tuple[Key, Key]:
    """The keys an attempt counts against (a username no user can have is cut
    short: the table's size stays bounded)."""
    return ("user", username[:MAX_USERNAME_CHARS]), ("address", address[:MAX_USERNAME_CHARS])
