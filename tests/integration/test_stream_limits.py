"""The streams' limits (services/common/eventstore.py): stated, created,
and applied to streams that older versions created without them."""

from nats.js import api as js_api

from services.common.connection import Connection
from services.common.eventstore import LOGS_MAX_AGE_S, LOGS_MAX_BYTES, EventStore, StreamLimits


async def test_new_streams_get_the_limits(event_store: EventStore) -> None:
    logs = (await event_store.js.stream_info(event_store.logs.stream)).config
    events = (await event_store.js.stream_info(event_store.events_stream)).config
    assert (logs.max_bytes, logs.max_age) == (LOGS_MAX_BYTES, LOGS_MAX_AGE_S)
    assert logs.discard == js_api.DiscardPolicy.OLD
    assert logs.max_msg_size == events.max_msg_size == event_store.nc.max_payload
    assert (events.max_bytes, events.max_age, events.max_msgs) == (-1, 0, -1)  # the log is kept for ever


async def test_the_gateways_limits_reach_streams_made_before_them(nats_url: str, namespace: str) -> None:
    older = EventStore(await Connection.open(nats_url), namespace)
    await older.js.add_stream(js_api.StreamConfig(name=older.logs.stream, subjects=[f"{namespace}.logs.>"]))
    await older.close()

    service = await EventStore.connect(nats_url, namespace)  # creates what is missing, changes nothing
    assert (await service.js.stream_info(service.logs.stream)).config.max_bytes == -1
    gateway = await EventStore.connect(nats_url, namespace, limits=StreamLimits(logs_max_bytes=64 * 2**20))
    config = (await gateway.js.stream_info(gateway.logs.stream)).config
    assert (config.max_bytes, config.max_age) == (64 * 2**20, LOGS_MAX_AGE_S)
    assert config.discard == js_api.DiscardPolicy.OLD
    again = await EventStore.connect(nats_url, namespace)  # a service started later leaves them
    assert (await again.js.stream_info(again.logs.stream)).config.max_bytes == 64 * 2**20
    for store in (service, gateway, again):
        await store.close()
