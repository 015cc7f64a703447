"""/metrics on a long history: the time one scrape takes (what Prometheus waits
for) with the generated log (bench/gen_log.py) projected into the read
models, and each of its sources alone: the read models' counts (trials,
runs, tasks), the agents, nats-server's consumer list, the log's end.

    python bench/metrics_scrape.py [--events 1000000] [--scrapes 20] [--data-dir /tmp/det-bench-recovery]

The servers and the log are kept in --data-dir (as bench/rebuild.py keeps
them): the first run projects the log into the read models (a rebuild's
time), later runs only measure. Nothing is appended to the log.
"""

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import asyncpg
from _recovery import DEFAULT_DATA_DIR, ensure_database, ensure_log, servers

from services.common.eventstore import EventStore
from services.common.logging import configure_logging
from services.gateway.features.monitoring.consumers import consumers_of
from services.gateway.features.monitoring.service import Monitoring
from services.gateway.features.parts import Parts, Queries
from services.gateway.features.users.directory import UserDirectory
from services.gateway.projector import Projector
from services.gateway.settings import GatewaySettings


async def timed(what: str, call: Callable[[], Awaitable[object]], times: int) -> None:
    """Runs `call` `times` times; prints the median and the slowest in ms."""
    seconds = []
    for _ in range(times):
        started = time.perf_counter()
        await call()
        seconds.append(time.perf_counter() - started)
    print(f"  {what:28} median {statistics.median(seconds) * 1e3:7.1f} ms   max {max(seconds) * 1e3:7.1f} ms")


async def bench(args: argparse.Namespace) -> None:
    with servers(args.data_dir) as running:
        namespace, last = await ensure_log(running.nats_url, args.events, args.seed)
        await ensure_database(running.postgres_url, namespace)
        database_url = running.database_url(namespace)
        store = await EventStore.connect(running.nats_url, namespace, name="bench-metrics")
        pool = await asyncpg.create_pool(database_url, min_size=1, max_size=4)
        try:
            projector = Projector(store, pool)
            started = time.perf_counter()
            await projector.run(follow=False)  # the read models up to the log's end
            print(f"read models at sequence {projector.position:,} ({time.perf_counter() - started:.1f} s)")
            settings = GatewaySettings(
                nats_url=running.nats_url, namespace=namespace, database_url=database_url
            )
            queries = Queries(pool)
            monitoring = Monitoring(Parts(settings, store, projector, queries, UserDirectory(store)))
            body, _ = await monitoring.exposition()
            lines = body.count(b"\n")
            print(f"a {last:,}-event log; one scrape: {len(body):,} bytes, {lines:,} lines")
            await timed("scrape (every source)", monitoring.exposition, args.scrapes)
            await timed("trials, runs, tasks counts", queries.monitoring.counts, args.scrapes)
            await timed("agents", queries.agents.agents, args.scrapes)
            await timed("consumer list", lambda: consumers_of(store.js, store.events_stream), args.scrapes)
            await timed("log's last sequence", store.last_sequence, args.scrapes)
        finally:
            await pool.close()
            await store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scrapes", type=int, default=20)
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    args = parser.parse_args()
    configure_logging("bench", json=False, log_file=None, level="WARNING")
    asyncio.run(bench(args))


if __name__ == "__main__":
    main()
