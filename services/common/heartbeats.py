"""Agents' heartbeats: how the scheduler tells a running agent from a gone one.

Each run of an agent publishes a heartbeat every DET_AGENT_HEARTBEAT_S on
core NATS, `<namespace>.heartbeats.<agent_id>`: JSON `{"agent_id",
"registration_event_id", "sent_at_ns"}`, where the registration is the event
id of that run's AgentRegistered. Heartbeats are not stored (they are not
state: no stream holds that subject). The scheduler listens
(`HeartbeatListener`) and appends AgentLost for a registration it has not
heard from for DET_AGENT_LOST_S (services/scheduler/liveness.py).

Each agent's nats-server user may publish on its own heartbeat subject only
(deploy/local/credentials.py), and the listener takes a heartbeat only from
the subject of the agent it names: no agent keeps another one alive.

Both sides ride out NATS outages quietly: the connection says once per
outage that nats-server is gone (services/common/connection.py). An agent
skips the heartbeats it cannot send (sent late, they would say nothing). The
listener counts a silence that was its own against no one: it has heard
everyone only since its connection last came back (`hearing_since`).
"""

import asyncio
import json
import time
from dataclasses import dataclass

import nats.errors
import structlog
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg

from services.common.connection import OUTAGE_ERRORS

# How long the listener waits for nats-server to answer a round trip.
ROUND_TRIP_S = 2.0
# What a publish or round trip raises while nats-server is unreachable (or
# the connection is being closed at the end).
UNREACHABLE: tuple[type[Exception], ...] = (*OUTAGE_ERRORS, nats.errors.ConnectionClosedError)

log = structlog.get_logger()


@dataclass(frozen=True)
class Heartbeat:
    agent_id: str
    registration_event_id: str
    sent_at_ns: int

    def encode(self) -> bytes:
        return json.dumps(
            {
                "agent_id": self.agent_id,
                "registration_event_id": self.registration_event_id,
                "sent_at_ns": self.sent_at_ns,
            }
        ).encode()

    @classmethod
    def decode(cls, data: bytes) -> "Heartbeat":
        """Raises ValueError (or KeyError, TypeError) for anything else."""
        fields = json.loads(data)
        return cls(str(fields["agent_id"]), str(fields["registration_event_id"]), int(fields["sent_at_ns"]))


def heartbeat_subject(namespace: str, agent_id: str) -> str:
    return f"{namespace}.heartbeats.{agent_id}"


async def send_heartbeats(
    nc: NatsClient, namespace: str, agent_id: str, registration_event_id: str, interval_s: float
) -> None:
    """Publishes this agent run's heartbeat every `interval_s`, the first at
    once, until cancelled. While nats-server is unreachable it sends nothing
    and says nothing (the connection logs the outage)."""
    subject = heartbeat_subject(namespace, agent_id)
    while True:
        if nc.is_connected:
            heartbeat = Heartbeat(agent_id, registration_event_id, time.time_ns())
            try:
                await nc.publish(subject, heartbeat.encode())
            except UNREACHABLE as error:
                log.debug("heartbeat_not_sent", error=repr(error))
        await asyncio.sleep(interval_s)


class HeartbeatListener:
    """Hears every agent's heartbeats and remembers, per agent run, when the
    newest one arrived (by this process's clock: agents' clocks may differ)."""

    def __init__(self, nc: NatsClient, namespace: str) -> None:
        self.nc = nc
        self.namespace = namespace
        # (agent id, registration event id) -> when its newest heartbeat arrived.
        self.last: dict[tuple[str, str], int] = {}
        self._since: int | None = None
        self._reconnects = 0

    async def start(self) -> None:
        """Subscribes for as long as the connection lasts (closing it ends the subscription)."""
        await self.nc.subscribe(f"{self.namespace}.heartbeats.>", cb=self._received)
        self._since, self._reconnects = time.time_ns(), self.nc.stats["reconnects"]

    async def _received(self, msg: Msg) -> None:
        try:
            heartbeat = Heartbeat.decode(msg.data)
        except (ValueError, KeyError, TypeError) as error:
            log.warning("heartbeat_malformed", subject=msg.subject, error=repr(error))
            return
        if msg.subject != heartbeat_subject(self.namespace, heartbeat.agent_id):
            # nats-server lets an agent publish on its own subject only: one that names another agent lies.
            log.warning(
                "heartbeat_malformed", subject=msg.subject, error=f"it names agent {heartbeat.agent_id}"
            )
            return
        self.last[(heartbeat.agent_id, heartbeat.registration_event_id)] = time.time_ns()

    def hearing_since(self, now_ns: int) -> int | None:
        """Since when every heartbeat sent has reached this listener: its start
        or, after an outage, the moment it was connected again (`now_ns` when
        it sees that first). None while nats-server is unreachable."""
        if not self.nc.is_connected:
            self._since = None
            return None
        reconnects = self.nc.stats["reconnects"]
        if self._since is None or reconnects != self._reconnects:
            self._since, self._reconnects = now_ns, reconnects
        return self._since

    async def still_hearing(self, since_ns: int) -> bool:
        """True when nats-server answers a round trip now and the connection
        has not dropped since `hearing_since` said `since_ns`: a silence
        before this moment was the agents', not this listener's (a connection
        that died without closing looks up until its pings go unanswered)."""
        try:
            await self.nc.flush(timeout=ROUND_TRIP_S)  # type: ignore[arg-type]  # a float works
        except UNREACHABLE as error:
            log.debug("heartbeat_round_trip_failed", error=repr(error))
            return False
        return self.hearing_since(time.time_ns()) == since_ns
