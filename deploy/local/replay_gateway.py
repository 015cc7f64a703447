"""`python -m deploy.local.replay_gateway`: the part "gateway" of a replay (replay_home.py).

It brings the folder's event log up to the bundle that DET_REPLAY_BUNDLE names (checked whole
by `det deploy local replay` before anything started): the events the log does not hold yet,
appended in the bundle's order, each on its aggregate's subject. Each append expects the log's
last sequence to be the one before it, so none is stored twice or out of order, and a gateway
restarted in the middle goes on where the log stops. The replay's sequences are the events'
places in the bundle. Then it runs the gateway (services.gateway), which reads that log and
appends nothing (DET_REPLAY_OF, services/gateway/read_only.py).
"""

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

from deploy.local.replay_bundle import BundleError, Event, read_bundle
from services.common.eventstore import EventStore
from services.common.settings import CommonSettings

# Appends sent before their acknowledgements are awaited.
WINDOW = 1000
# How long an acknowledgement may take (nats-py never answers a refused asynchronous publish).
ACK_TIMEOUT_S = 60.0


class LoadError(Exception):
    """The log cannot be brought up to the bundle."""


async def load(store: EventStore, bundle: Path) -> tuple[int, int]:
    """Appends the bundle's events the log lacks; (events in the bundle, events appended now).
    LoadError when the log holds more events than the bundle (it is not this bundle's)."""
    held = await store.last_sequence()
    js = store.js  # one context: it keeps the pending acknowledgements
    pending: list[asyncio.Future[Any]] = []
    count = 0
    for line in read_bundle(bundle):
        if not isinstance(line, Event):
            continue
        count += 1
        if count <= held:
            continue
        pending.append(
            await js.publish_async(
                store.subject(line.envelope.aggregate),
                line.envelope.SerializeToString(),
                stream=store.events_stream,
                headers={"Nats-Expected-Last-Sequence": str(count - 1)},
            )
        )
        if len(pending) >= WINDOW:
            await _acknowledged(pending)
    await _acknowledged(pending)
    if held > count:
        raise LoadError(f"the event log holds {held} events, more than the {count} of {bundle}")
    return count, max(count - held, 0)


async def _acknowledged(pending: list[asyncio.Future[Any]]) -> None:
    try:
        await asyncio.wait_for(asyncio.gather(*pending), timeout=ACK_TIMEOUT_S)
    except TimeoutError:
        raise LoadError(
            f"nats-server did not store an event within {ACK_TIMEOUT_S:.0f} s (the log changed meanwhile?)"
        ) from None
    pending.clear()


async def _load(bundle: Path) -> tuple[int, int]:
    settings = CommonSettings()
    store = await EventStore.connect(settings.nats_url, settings.namespace, name="replay-loader")
    try:
        return await load(store, bundle)
    finally:
        await store.close()


def main() -> int:
    bundle = Path(os.environ["DET_REPLAY_BUNDLE"])
    try:
        count, appended = asyncio.run(_load(bundle))
    except (BundleError, LoadError) as error:
        print(f"replay: {error}", file=sys.stderr)
        return 2
    print(f"replay: the event log holds the {count} events of {bundle} ({appended} appended now)", flush=True)
    from services.gateway.__main__ import main as serve

    return serve()


if __name__ == "__main__":
    sys.exit(main())
