"""det events on a big log: GetEvents through a gateway (gRPC, end to end:
the filter, the read of the log, the wording, the stream) on the generated
log of bench/gen_log.py, for one trial (`det events --trial N`: its
aggregates' subjects only; `det events explain trial N`: those and its
experiment's, and the causation tree) and for one event type since a time (`det events
--type X --since T`: the subjects of that type's kind, from the first event
stored at T), as the admin.

    python bench/event_queries.py [--events 1000000] [--reps 5] [--data-dir /tmp/det-bench-recovery]

The servers and the log are kept in --data-dir, as bench/rebuild.py keeps
them (run it first, or this generates the log; the gateway then projects
what its read models lack before the first figure). Starting the gateway
appends the built-in users once, and each run one login.
"""

import argparse
import asyncio
import contextlib
import statistics
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from pathlib import Path
from typing import cast

import grpc
from _recovery import DEFAULT_DATA_DIR, ensure_database, ensure_log, servers
from _servers import SECRET

from deploy.local.servers import free_port
from determined.common.passwords import salted_hash
from determined.proto import api_pb2, api_pb2_grpc
from services.common.eventlog import StoredEvent
from services.common.eventstore import EventStore
from services.common.logging import configure_logging
from services.gateway.server import Gateway
from services.gateway.settings import GatewaySettings

PASSWORD = "bench-password"
# The type of `--type X --since T`: the searcher's stops (on the trial subjects, not the metrics).
TYPE = "TrialStopRequested"

Stub = api_pb2_grpc.DeterminedStub
Metadata = tuple[tuple[str, str], ...]


async def events(stub: Stub, admin: Metadata, **fields: object) -> int:
    """How many events GetEvents answers for the filter, read to the end."""
    request = api_pb2.GetEventsRequest(filter=api_pb2.EventFilter(**fields))  # type: ignore[arg-type]
    return sum([len(response.events) async for response in stub.GetEvents(request, metadata=admin)])


async def explained(stub: Stub, admin: Metadata, kind: str, key: str) -> int:
    """How many events ExplainEvents' chain shows (`det events explain`)."""
    answer = await stub.ExplainEvents(api_pb2.ExplainEventsRequest(kind=kind, id=key), metadata=admin)
    return len(answer.chain)


async def timed(what: str, reps: int, query: Callable[[], Awaitable[int]]) -> None:
    seconds, found = [], 0
    for _ in range(reps):
        started = time.perf_counter()
        found = await query()
        seconds.append(time.perf_counter() - started)
    print(
        f"{what}: {found:,} events, median {statistics.median(seconds) * 1000:,.0f} ms"
        f" (min {min(seconds) * 1000:,.0f}, max {max(seconds) * 1000:,.0f}) over {reps}",
        flush=True,
    )


async def middle_trial(stub: Stub, admin: Metadata) -> int:
    """A trial of the experiment in the middle of the log."""
    listed = await stub.GetExperiments(api_pb2.GetExperimentsRequest(), metadata=admin)
    ids = sorted(experiment.id for experiment in listed.experiments)
    trials = await stub.GetExperimentTrials(
        api_pb2.GetExperimentTrialsRequest(experiment_id=ids[len(ids) // 2]), metadata=admin
    )
    return int(trials.trials[0].id)


async def occurred_at(store: EventStore, sequence: int) -> int:
    """When the event at `sequence` occurred (its first event is read, no more)."""
    reading = cast(AsyncGenerator[StoredEvent, None], store.read(None, sequence, follow=False))
    async with contextlib.aclosing(reading) as events_read:
        return (await anext(events_read)).envelope.occurred_at_ns


async def bench(args: argparse.Namespace) -> None:
    with servers(args.data_dir) as running:
        namespace, last = await ensure_log(running.nats_url, args.events, args.seed)
        await ensure_database(running.postgres_url, namespace)
        settings = GatewaySettings(
            nats_url=running.nats_url,
            namespace=namespace,
            database_url=running.database_url(namespace),
            gateway_port=free_port(),
            gateway_host="127.0.0.1",
            cluster_secret=SECRET,
            initial_user_password=PASSWORD,
        )
        started = time.perf_counter()
        gateway = await Gateway.start(settings)
        try:
            # A gateway of new code rebuilds its read models first (a minute on a million events).
            if not await gateway.projector.catch_up(timeout_s=1800):
                raise SystemExit("the gateway did not project the log within 30 minutes")
            print(f"gateway up and projected in {time.perf_counter() - started:.1f} s", flush=True)
            async with grpc.aio.insecure_channel(f"127.0.0.1:{gateway.port}") as channel:
                stub = Stub(channel)
                login = api_pb2.LoginRequest(username="admin", password=salted_hash(PASSWORD), is_hashed=True)
                admin = (("authorization", f"Bearer {(await stub.Login(login)).token}"),)
                trial_id = await middle_trial(stub, admin)
                since_ns = await occurred_at(gateway.store, last // 2)
                print(f"a {last:,}-event log; trial {trial_id}; T = the time of sequence {last // 2:,}")
                await timed(
                    f"det events --trial {trial_id}",
                    args.reps,
                    lambda: events(stub, admin, trial_id=trial_id),
                )
                await timed(
                    f"det events explain trial {trial_id}",
                    args.reps,
                    lambda: explained(stub, admin, "trial", str(trial_id)),
                )
                await timed(
                    f"det events --type {TYPE} --since T",
                    args.reps,
                    lambda: events(stub, admin, types=[TYPE], since_ns=since_ns),
                )
                await timed(
                    f"det events --type {TYPE} (the whole log)",
                    args.reps,
                    lambda: events(stub, admin, types=[TYPE]),
                )
        finally:
            await gateway.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    args = parser.parse_args()
    configure_logging("bench", json=False, log_file=None, level="WARNING")
    asyncio.run(bench(args))


if __name__ == "__main__":
    main()
