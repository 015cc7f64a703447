"""`python -m services.gateway.rebuild [--until SEQUENCE]`: drops the read
models and replays the event log into them, from sequence 1 up to its end (or
to SEQUENCE: the read models as they were then), with the gateway's
settings (DET_DATABASE_URL, DET_NATS_URL, DET_NAMESPACE). Stop the gateways
first: a running projector would write into the schema while it is rebuilt.

`--verify [--max-differences N]` leaves the live read models as they are and
checks them against a rebuild beside them (verify.py), gateways running:
exit status 0 and one line when every row is what the log gives, 1 and every
row that differs (N per table, the others counted) when some do, 2 when it
could not check. `det deploy local verify` runs it on a local cluster.
"""

import argparse
import asyncio
import sys
import time

import asyncpg
import structlog

from services.common.eventstore import EventStore
from services.common.logging import configure_logging
from services.gateway import verify
from services.gateway.projector import Projector
from services.gateway.schema import create_schema, drop_schema
from services.gateway.settings import GatewaySettings

log = structlog.get_logger()


class RebuildError(Exception):
    """The rebuild asked for cannot be made (the message says why)."""


async def rebuild(store: EventStore, pool: asyncpg.Pool, until: int | None = None) -> int:
    """Drops and recreates the read-model schema, then applies the log from
    sequence 1 up to its current end (or `until`, stored already); returns
    the last applied sequence."""
    if until is not None and until > (stored := await store.last_sequence()):
        raise RebuildError(f"sequence {until} is past the end of the log (sequence {stored})")
    async with pool.acquire() as connection:
        await drop_schema(connection)
        await create_schema(connection)
    projector = Projector(store, pool)
    await projector.run(follow=False, until=until)
    return projector.position


async def _rebuild(settings: GatewaySettings, until: int | None) -> None:
    store = await EventStore.connect(settings.nats_url, settings.namespace, name="gateway-rebuild")
    pool = await asyncpg.create_pool(settings.database_url, min_size=1, max_size=2)
    try:
        started = time.monotonic()
        position = await rebuild(store, pool, until)
        seconds = time.monotonic() - started
        log.info(
            "rebuilt", sequence=position, seconds=round(seconds, 2), events_per_s=round(position / seconds)
        )
    finally:
        await pool.close()
        await store.close()


async def _verify(settings: GatewaySettings, max_differences: int) -> int:
    try:
        connection = await asyncpg.connect(settings.database_url)
    except (OSError, asyncpg.PostgresError) as error:
        print(f"cannot reach the read models' database: {error}", file=sys.stderr)
        return 2
    try:
        verification = await verify.verify(settings, connection, max_differences)
    except verify.VerifyError as error:
        print(f"cannot check the read models: {error}", file=sys.stderr)
        return 2
    finally:
        await connection.close()
    print("\n".join(verify.report(verification)))
    return 0 if verification.healthy else 1


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m services.gateway.rebuild",
        description="rebuild or check the read models from the event log",
    )
    parser.add_argument(
        "--until",
        type=_sequence,
        default=None,
        metavar="SEQUENCE",
        help="rebuild up to this sequence of the log",
    )
    parser.add_argument(
        "--verify",
        action="store_true",
        help="check the live read models against a rebuild, leaving them as they are",
    )
    parser.add_argument(
        "--max-differences",
        type=_count,
        metavar="N",
        default=verify.MAX_DIFFERENCES,
        help=f"with --verify: the differing rows shown per table (default {verify.MAX_DIFFERENCES})",
    )
    arguments = parser.parse_args(argv)
    if arguments.verify and arguments.until is not None:
        parser.error("--verify checks against the live projector's position: --until goes without it")
    return arguments


def _sequence(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"a sequence of the log (a whole number at least 0), got {text!r}")
    return int(text)


def _count(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"a whole number at least 1, got {text!r}")
    return int(text)


def main(argv: list[str] | None = None) -> int:
    arguments = _arguments(argv)
    settings = GatewaySettings()  # type: ignore[call-arg]  # read from the environment
    configure_logging("gateway-rebuild", json=settings.log_json, log_file=None, level=settings.log_level)
    if arguments.verify:
        return asyncio.run(_verify(settings, arguments.max_differences))
    try:
        asyncio.run(_rebuild(settings, arguments.until))
    except RebuildError as error:
        print(f"cannot rebuild the read models: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
