"""Driving a pure core in unit tests the way the decider Shell does."""

from collections.abc import Callable
from typing import Any, TypeVar

from services.common.envelope import Append

S = TypeVar("S")


def settle(core: Any, state: S, given: Callable[..., S]) -> tuple[S, list[Append]]:
    """Decides and folds (with the test's own `given(*payloads, state=...)`)
    until nothing more is decided; returns the state and every decision."""
    decided: list[Append] = []
    for _ in range(100):
        appends = core.decide(state)
        if not appends:
            return state, decided
        decided += appends
        state = given(*[a.payload for a in appends], state=state)
    raise AssertionError(f"decisions did not settle: {[a.msg_id for a in decided[-5:]]}")
