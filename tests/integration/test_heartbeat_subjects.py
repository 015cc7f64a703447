"""The scheduler's heartbeat listener takes a heartbeat only from the subject of
the agent it names: nats-server lets each agent publish on its own subject only
(deploy/local/credentials.py), so no agent keeps another one alive."""

import asyncio

import nats

from services.common.heartbeats import Heartbeat, HeartbeatListener, heartbeat_subject


async def test_a_heartbeat_counts_only_on_the_subject_of_the_agent_it_names(
    nats_url: str, namespace: str
) -> None:
    client = await nats.connect(nats_url)
    try:
        listener = HeartbeatListener(client, namespace)
        await listener.start()
        lying = Heartbeat("agent-2", "registration-2", 1)
        await client.publish(heartbeat_subject(namespace, "agent-1"), lying.encode())
        honest = Heartbeat("agent-1", "registration-1", 1)
        await client.publish(heartbeat_subject(namespace, "agent-1"), honest.encode())
        async with asyncio.timeout(10):
            while ("agent-1", "registration-1") not in listener.last:
                await asyncio.sleep(0.01)
        assert list(listener.last) == [("agent-1", "registration-1")]  # in order: the lie came first
    finally:
        await client.close()
