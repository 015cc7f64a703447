"""Both event logs (services/common/eventlog.py) for tests that must hold on
either: `event_logs` opens logs of one implementation per parameter (the
NATS EventStore on the session's nats-server, or a MemoryEventLog), and
`event_log` is one such log. A test module imports the fixtures it uses
(`from support.event_logs import event_log, event_logs  # noqa: F401`)."""

from collections.abc import AsyncIterator

import pytest

from services.common.eventlog import EventLog
from services.common.eventstore import EventStore
from services.common.memory_log import MemoryEventLog


class EventLogs:
    """Opens logs of one implementation, all on the test's namespace, and can
    store what a holder of a part's password could publish."""

    def __init__(self, kind: str, namespace: str, nats_url: str = "") -> None:
        self.kind = kind
        self.namespace = namespace
        self.nats_url = nats_url
        self.opened: list[EventLog] = []

    async def open(self, appends: frozenset[str] | None = None) -> EventLog:
        """A log appending only `appends` (any, when None). Memory logs are
        each their own; NATS logs of one test share its namespace's streams."""
        if self.kind == "nats":
            log: EventLog = await EventStore.connect(self.nats_url, self.namespace, appends=appends)
        else:
            log = MemoryEventLog(self.namespace, appends)
        self.opened.append(log)
        return log

    async def publish_raw(self, log: EventLog, subject: str, data: bytes) -> int:
        """Stores `data` on `subject` unchecked; its sequence."""
        if isinstance(log, EventStore):
            return (await log.js.publish(subject, data, stream=log.events_stream)).seq
        assert isinstance(log, MemoryEventLog)
        return log.publish_raw(subject, data)

    async def close(self) -> None:
        for log in self.opened:
            await log.close()


@pytest.fixture(params=["nats", "memory"])
async def event_logs(request: pytest.FixtureRequest, namespace: str) -> AsyncIterator[EventLogs]:
    # The session's nats-server only for the NATS parameter: a memory run starts no server.
    url = request.getfixturevalue("nats_url") if request.param == "nats" else ""
    logs = EventLogs(request.param, namespace, url)
    yield logs
    await logs.close()


@pytest.fixture
async def event_log(event_logs: EventLogs) -> EventLog:
    return await event_logs.open()
