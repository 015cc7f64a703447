"""Which TensorBoards the gateway stops for their idle_timeout (features/tasks/idle.py)."""

import json

import pytest

from determined.proto import api_pb2
from services.gateway.features.tasks import idle
from services.gateway.features.tasks.idle import IdleTimeout, ProxyActivity

S = 1_000_000_000
TIMEOUT = IdleTimeout("tb", "tb.1", timeout_s=60.0, started_ns=100 * S)


def task(task_type: str = "TENSORBOARD", state: str = "RUNNING", config: object = None) -> api_pb2.Task:
    return api_pb2.Task(
        id="tb",
        allocation_id="tb.1",
        task_type=task_type,
        state=state,
        start_time_ns=100 * S,
        config_json=json.dumps({"idle_timeout": "1m"} if config is None else config),
    )


def test_only_running_tensorboards_with_an_idle_timeout_are_watched() -> None:
    assert idle.idle_timeouts([task()]) == [TIMEOUT]
    assert idle.idle_timeouts([task(task_type="NOTEBOOK")]) == []  # the agent watches notebooks
    assert idle.idle_timeouts([task(state="STARTING")]) == []
    assert idle.idle_timeouts([task(config={})]) == []
    assert idle.idle_timeouts([task(config={"idle_timeout": "never"})]) == []


@pytest.mark.parametrize(
    ("last_used_s", "open_connections", "watching_since_s", "now_s", "killed"),
    [
        (None, 0, 0, 159, False),  # started 59 s ago
        (None, 0, 0, 160, True),  # started 60 s ago, never opened
        (150, 0, 0, 209, False),  # opened 59 s ago
        (150, 0, 0, 210, True),
        (150, 1, 0, 10_000, False),  # a WebSocket stays open: in use
        (None, 0, 500, 559, False),  # this gateway has watched for 59 s only
        (None, 0, 500, 560, True),
    ],
)
def test_a_tensorboard_is_killed_once_unused_for_its_timeout(
    last_used_s: int | None, open_connections: int, watching_since_s: int, now_s: int, killed: bool
) -> None:
    activity = ProxyActivity()
    if last_used_s is not None:
        activity.used("tb", last_used_s * S)
    for _ in range(open_connections):
        activity.opened("tb", (last_used_s or 0) * S)
    kills = idle.idle_kills([TIMEOUT], activity, watching_since_s * S, now_s * S)
    assert [kill.aggregate for kill in kills] == (["allocation/tb.1"] if killed else [])
    if killed:
        assert kills[0].msg_id == "allocation-kill-idle-tb.1"
        assert kills[0].payload.reason == "idle_timeout: nobody opened it through the gateway for 60s"


def test_a_closed_websocket_counts_as_the_last_use() -> None:
    activity = ProxyActivity()
    activity.opened("tb", 100 * S)
    activity.closed("tb", 300 * S)
    assert activity.open_connections == {}
    assert idle.idle_kills([TIMEOUT], activity, 0, 359 * S) == []
    assert len(idle.idle_kills([TIMEOUT], activity, 0, 360 * S)) == 1


def test_the_looks_are_a_quarter_of_the_shortest_timeout_within_bounds() -> None:
    assert idle.check_every_s([]) == idle.CHECK_S
    assert idle.check_every_s([TIMEOUT]) == idle.CHECK_S
    assert idle.check_every_s([IdleTimeout("a", "a.1", 8.0, 0)]) == 2.0
    assert idle.check_every_s([IdleTimeout("a", "a.1", 1.0, 0)]) == idle.MIN_CHECK_S
