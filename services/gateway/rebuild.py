"""`python -m services.gateway.rebuild`: drops the read models and replays
the whole event log into them (DET_DATABASE_URL, DET_NATS_URL,
DET_NAMESPACE). Stop the gateways first: a running projector would write
into the schema while it is rebuilt."""

import asyncio
import sys
import time

import asyncpg
import structlog

from services.common.eventstore import EventStore
from services.common.logging import configure_logging
from services.gateway.projector import Projector
from services.gateway.schema import create_schema, drop_schema
from services.gateway.settings import GatewaySettings

log = structlog.get_logger()


async def rebuild(store: EventStore, pool: asyncpg.Pool) -> int:
    """Drops and recreates the read-model schema, then applies the log from
    sequence 1 up to its current end; returns the last applied sequence."""
    async with pool.acquire() as connection:
        await drop_schema(connection)
        await create_schema(connection)
    projector = Projector(store, pool)
    await projector.run(follow=False)
    return projector.position


async def _main(settings: GatewaySettings) -> None:
    store = await EventStore.connect(settings.nats_url, settings.namespace, name="gateway-rebuild")
    pool = await asyncpg.create_pool(settings.database_url, min_size=1, max_size=2)
    try:
        started = time.monotonic()
        position = await rebuild(store, pool)
        seconds = time.monotonic() - started
        log.info(
            "rebuilt", sequence=position, seconds=round(seconds, 2), events_per_s=round(position / seconds)
        )
    finally:
        await pool.close()
        await store.close()


def main() -> int:
    settings = GatewaySettings()  # type: ignore[call-arg]  # read from the environment
    configure_logging("gateway-rebuild", json=settings.log_json, log_file=None, level=settings.log_level)
    asyncio.run(_main(settings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
