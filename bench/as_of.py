"""The cluster as it was: `det experiment describe --at-seq S` (and `det agent
list`, `det job list` as of S) mid-log on the generated log (bench/gen_log.py),
timed through the gateway's own functions (features/events/as_of.py), which
fold the asked part of the log into scratch read models. The live read models
are brought up to the log's end first (a full replay the first time).

    python bench/as_of.py [--events 1000000] [--at 0.5] [--runs 3] [--data-dir /tmp/det-bench-recovery]

The servers and the log are kept in --data-dir (see bench/rebuild.py).
"""

import argparse
import asyncio
import functools
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
from _recovery import DEFAULT_DATA_DIR, live_parts, servers

from determined.proto import api_pb2
from services.common.job_queue import PublishedQueue
from services.common.logging import configure_logging
from services.gateway.auth import UserPrincipal, acting_as
from services.gateway.features.events.as_of import AsOfReads
from services.gateway.features.events.as_of_point import first_event

# The experiments described: at most this many of those running at the point.
EXPERIMENTS = 3


async def timed(runs: int, answer: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    """The median seconds of `runs` answers, and the last answer."""
    seconds, found = [], None
    for _ in range(runs):
        started = time.perf_counter()
        found = await answer()
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds), found


async def bench(args: argparse.Namespace) -> None:
    with servers(args.data_dir) as running:
        async with live_parts(running, args.events, args.seed, "bench-as-of") as parts:
            as_of = AsOfReads(parts)
            sequence = max(1, int(parts.projector.position * args.at))
            stored = await first_event(parts.store, sequence)
            assert stored is not None
            point = api_pb2.AsOf(sequence=sequence)
            running_then = await running_experiments(parts.projector.pool, stored.envelope.occurred_at_ns)
            with acting_as(UserPrincipal("admin", user_id=1, admin=True)):
                for experiment_id in running_then:
                    request = api_pb2.GetExperimentRequest(experiment_id=experiment_id, as_of=point)
                    seconds, described = await timed(args.runs, functools.partial(as_of.experiment, request))
                    print(
                        f"describe --at-seq {sequence:,} of experiment {experiment_id}"
                        f" ({len(described.trials):,} trials then): {seconds:.2f} s"
                    )
                agents_request = api_pb2.GetAgentsRequest(as_of=point)
                seconds, agents = await timed(args.runs, functools.partial(as_of.agents, agents_request))
                print(f"agent list --at-seq {sequence:,} ({len(agents.agents)} agents): {seconds:.2f} s")
                queued = functools.partial(as_of.job_queue, point, PublishedQueue())
                seconds, (queue, _, _) = await timed(args.runs, queued)
                print(f"job list --at-seq {sequence:,} ({len(queue.jobs)} jobs): {seconds:.2f} s")


async def running_experiments(pool: asyncpg.Pool, at_ns: int) -> list[int]:
    """The experiments that ran at `at_ns`, those with the most trials first."""
    rows = await pool.fetch(
        "SELECT e.id FROM read_model.experiments e JOIN read_model.trials t ON t.experiment_id = e.id"
        " WHERE e.started_at_ns <= $1 AND (e.ended_at_ns IS NULL OR e.ended_at_ns > $1)"
        " GROUP BY e.id ORDER BY count(*) DESC, e.id LIMIT $2",
        at_ns,
        EXPERIMENTS,
    )
    return [row[0] for row in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--at", type=float, default=0.5, help="the point, as a fraction of the log")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    args = parser.parse_args()
    configure_logging("bench", json=False, log_file=None, level="WARNING")
    asyncio.run(bench(args))


if __name__ == "__main__":
    main()
