"""Rebuild speed: drops the read models and replays the generated log
(bench/gen_log.py) into them with `services.gateway.rebuild.rebuild`, the
code `python -m services.gateway.rebuild` runs. Prints events/s per run and
a digest of every read-model row, so that two versions of the projection can
be compared on the same log, and the CPU each part used per event (which
other work on the machine changes less than it changes events/s).

    python bench/rebuild.py [--events 1000000] [--runs 2] [--data-dir /tmp/det-bench-recovery] [--fresh]

The servers and the log are kept in --data-dir: a second run does not
generate the log again (--fresh starts over).
"""

import argparse
import asyncio
import hashlib
import os
import resource
import statistics
import time
from pathlib import Path

import asyncpg
from _recovery import DEFAULT_DATA_DIR, ensure_database, ensure_log, servers

from services.common.eventstore import EventStore
from services.common.logging import configure_logging
from services.gateway.rebuild import rebuild
from services.gateway.schema import SCHEMA, metadata


async def digest(pool: asyncpg.Pool) -> str:
    """A hash of every row of every read-model table, in a fixed order."""
    total = hashlib.sha256()
    for table in metadata.sorted_tables:
        row = await pool.fetchrow(
            f"SELECT count(*) AS n, md5(string_agg(t::text, E'\\n' ORDER BY t::text)) AS h FROM {SCHEMA}.{table.name} t"
        )
        print(f"  {table.name:20} {row['n']:>10,} rows")
        total.update(f"{table.name}:{row['n']}:{row['h']}\n".encode())
    return total.hexdigest()[:16]


def cpu_seconds() -> tuple[float, float, float]:
    """CPU seconds used so far by (this process: the projector; its children
    that ended: the replay helper of each run; its live descendants:
    nats-server and PostgreSQL)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    ended = resource.getrusage(resource.RUSAGE_CHILDREN)
    parents, used = {}, {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue  # it ended meanwhile
        pid = int(stat.parent.name)
        parents[pid], used[pid] = (
            int(fields[1]),
            (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"),
        )
    under, found = {os.getpid()}, True
    while found:
        found = False
        for pid, parent in parents.items():
            if parent in under and pid not in under:
                under.add(pid)
                found = True
    live = sum(used[pid] for pid in under if pid != os.getpid())
    return own.ru_utime + own.ru_stime, ended.ru_utime + ended.ru_stime, live


async def bench(args: argparse.Namespace) -> None:
    with servers(args.data_dir, fresh=args.fresh) as running:
        namespace, last = await ensure_log(running.nats_url, args.events, args.seed)
        await ensure_database(running.postgres_url, namespace)
        store = await EventStore.connect(running.nats_url, namespace, name="bench-rebuild")
        pool = await asyncpg.create_pool(running.database_url(namespace), min_size=1, max_size=2)
        try:
            rates = []
            for run in range(1, args.runs + 1):
                started, cpu_before = time.perf_counter(), cpu_seconds()
                position = await rebuild(store, pool)
                seconds = time.perf_counter() - started
                projector, helper, servers_cpu = (
                    (after - before) / position * 1e6
                    for after, before in zip(cpu_seconds(), cpu_before, strict=True)
                )
                rates.append(position / seconds)
                print(
                    f"run {run}: {position:,} events in {seconds:.1f} s = {position / seconds:,.0f} events/s"
                    f" (load {os.getloadavg()[0]:.1f}); CPU per event: replay helper {helper:.1f} µs,"
                    f" projector {projector:.1f} µs, nats-server + PostgreSQL {servers_cpu:.1f} µs",
                    flush=True,
                )
            if not args.no_digest:
                print(f"rows digest {await digest(pool)}")
            print(
                f"rebuild of a {last:,}-event log: median {statistics.median(rates):,.0f} events/s"
                f" over {len(rates)} runs"
            )
        finally:
            await pool.close()
            await store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument(
        "--fresh", action="store_true", help="remove --data-dir first (and generate the log again)"
    )
    parser.add_argument("--no-digest", action="store_true", help="skip the digest of the rows")
    args = parser.parse_args()
    configure_logging("bench", json=False, log_file=None, level="WARNING")
    asyncio.run(bench(args))


if __name__ == "__main__":
    main()
