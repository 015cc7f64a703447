"""The log tells an outage of nats-server in one line when it starts, named
by whether the connection had been up, whichever of nats-py's callbacks
notices first."""

from collections.abc import MutableMapping
from typing import Any

import nats.errors
from nats.aio.client import Client as NatsClient
from structlog.testing import capture_logs

from services.common.connection import Connection


def _outage_lines(logs: list[MutableMapping[str, Any]]) -> list[Any]:
    return [entry["event"] for entry in logs if entry["log_level"] == "warning"]


async def test_a_failed_write_noticed_before_the_end_of_the_connection_says_disconnected() -> None:
    connection = Connection("nats://127.0.0.1:1")
    connection._came_back("nats_connected")
    connection.nc._status = NatsClient.RECONNECTING  # a failed write started the reconnection
    with capture_logs() as logs:
        await connection._error(nats.errors.UnexpectedEOF())
        await connection._error(OSError("broken pipe"))
        await connection._disconnected()
    assert _outage_lines(logs) == ["nats_disconnected"]


async def test_the_end_of_the_connection_noticed_first_says_disconnected() -> None:
    connection = Connection("nats://127.0.0.1:1")
    connection._came_back("nats_connected")
    connection.nc._status = NatsClient.RECONNECTING
    with capture_logs() as logs:
        await connection._disconnected()
        await connection._error(OSError("connection refused"))
    assert _outage_lines(logs) == ["nats_disconnected"]


async def test_a_first_connection_that_fails_says_unavailable() -> None:
    connection = Connection("nats://127.0.0.1:1")
    connection.nc._status = NatsClient.CONNECTING
    with capture_logs() as logs:
        await connection._error(OSError("connection refused"))
        await connection._error(OSError("connection refused"))
    assert _outage_lines(logs) == ["nats_unavailable"]
