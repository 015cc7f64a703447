"""Checkpoint GC throughput: an experiment of `--checkpoints` checkpoints of `--files` small
files each (1 KiB; one of them metadata.json) ends with the GC policy 0/0/0, and the
checkpoint service (`python -m services.checkpoint`, its own process, as on a cluster)
deletes every one, on `shared_fs` (a local folder) and on S3 (moto's standalone server,
tests/support/s3_server.py). Figures per storage, from the event log's timestamps (stamped when
each event was appended):
- decision_ms: the experiment's end -> the service's CheckpointDeletionRequested;
- end_to_last_deleted_s: the experiment's end -> the last CheckpointDeleted;
- checkpoints_per_s, files_per_s: checkpoints (files) deleted per second between the
  decision and the last CheckpointDeleted;
- list_ms: the median time the storage takes to list one checkpoint's files, timed from
  here before the GC (each deletion lists them first: moto's listing walks every key of
  the bucket, so it grows with the bucket);
- service_cpu_ms_per_checkpoint: the service process's CPU time (user + system, its
  deletion threads included) over the GC, per checkpoint: the service's own cost, as
  against the storage's;
- left_files: files still in the storage afterwards (0 expected).

Starts its own nats-server (and moto server) in a temporary folder; writes the
checkpoints' files and their CheckpointReported / TrialValidationReported events first
(not timed), then starts the service and waits for it to be ready. Prints one JSON line
per storage (bench/_report.py emit).

Usage: python bench/gc_throughput.py [--checkpoints 10000] [--files 10] [--trials 100]
       [--workers 8] [--reps 1] [--only shared_fs|s3]
"""

import argparse
import asyncio
import concurrent.futures
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from _report import emit, log

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.s3_server import S3Server, running_s3_server  # the tests' moto server, shared

from deploy.local.servers import NatsServer, free_port
from determined.common import storage
from determined.proto import events_pb2 as ev
from services.common.envelope import Append, Envelope, aggregate, payload_of
from services.common.eventstore import EventStore

FILE_BYTES = 1024
APPENDS_AT_ONCE = 256
# Checkpoints whose listing is timed before the GC (list_ms).
LISTINGS = 20
DEADLINE_S = 1800.0
BACKENDS = ("shared_fs", "s3")


def checkpoint_files(files: int, steps: int) -> dict[str, bytes]:
    shards = {f"shard-{n}.bin": os.urandom(FILE_BYTES) for n in range(files - 1)}
    return {**shards, "metadata.json": json.dumps({"steps_completed": steps}).encode()}


def write_shared_fs(root: Path, checkpoints: dict[str, int], files: int) -> dict[str, dict[str, int]]:
    resources = {}
    for storage_id, steps in checkpoints.items():
        folder = root / storage_id
        folder.mkdir(parents=True)
        content = checkpoint_files(files, steps)
        for name, data in content.items():
            (folder / name).write_bytes(data)
        resources[storage_id] = {name: len(data) for name, data in content.items()}
    return resources


def write_s3(
    s3: S3Server, section: dict[str, Any], checkpoints: dict[str, int], files: int
) -> dict[str, dict[str, int]]:
    client = s3.client()
    bucket, prefix = section["bucket"], section["prefix"]
    resources = {}
    puts: list[tuple[str, bytes]] = []
    for storage_id, steps in checkpoints.items():
        content = checkpoint_files(files, steps)
        puts += [(f"{prefix}/{storage_id}/{name}", data) for name, data in content.items()]
        resources[storage_id] = {name: len(data) for name, data in content.items()}
    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        list(pool.map(lambda put: client.put_object(Bucket=bucket, Key=put[0], Body=put[1]), puts))
    return resources


def files_left(section: dict[str, Any], s3: S3Server | None) -> int:
    if s3 is None:
        return sum(len(names) for _, _, names in os.walk(section["host_path"]))
    return len(s3.keys(section["bucket"], section["prefix"] + "/"))


async def append_all(store: EventStore, appends: list[Append]) -> None:
    for start in range(0, len(appends), APPENDS_AT_ONCE):
        batch = appends[start : start + APPENDS_AT_ONCE]
        await asyncio.gather(*(store.append(a, actor="bench") for a in batch))


def experiment_events(
    section: dict[str, Any], checkpoints: dict[str, tuple[int, int]], resources: dict[str, dict[str, int]]
) -> list[Append]:
    storage = {**section, "save_experiment_best": 0, "save_trial_best": 0, "save_trial_latest": 0}
    config = {
        "entrypoint": "python3 train.py",
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}},
        "hyperparameters": {},
        "checkpoint_storage": storage,
    }
    created = ev.ExperimentCreated(experiment_id=1, config_json=json.dumps(config))
    appends = [Append("experiment/1", created, "created-1")]
    for storage_id, (trial_id, steps) in checkpoints.items():
        common = {"trial_id": trial_id, "experiment_id": 1, "steps_completed": steps}
        validation = ev.TrialValidationReported(**common, metrics_json=json.dumps({"loss": 1.0 / steps}))
        reported = ev.CheckpointReported(uuid=storage_id, **common, resources=resources[storage_id])
        appends.append(Append(aggregate("validation", trial_id), validation, f"validation-{storage_id}"))
        appends.append(Append(aggregate("checkpoint", storage_id), reported, f"checkpoint-{storage_id}"))
    return appends


@contextlib.contextmanager
def checkpoint_service(
    nats_url: str, namespace: str, folder: Path, workers: int
) -> Iterator[subprocess.Popen[bytes]]:
    ready = folder / f"{namespace}.ready"
    env = {
        **os.environ,
        "DET_NATS_URL": nats_url,
        "DET_NAMESPACE": namespace,
        "DET_READY_FILE": str(ready),
        "DET_LOG_FILE": str(folder / f"{namespace}.log"),
        "DET_CHECKPOINT_GC_WORKERS": str(workers),
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "services.checkpoint"], env=env, stdin=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 120
        while not ready.exists():
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the checkpoint service did not get ready (exit {process.poll()})")
            time.sleep(0.05)
        yield process
    finally:
        process.terminate()
        process.wait(30)


def listing_ms(section: dict[str, Any], storage_ids: list[str]) -> float:
    """The median time the storage takes to list one checkpoint's files (each deletion
    lists them first), from this process."""
    manager = storage.build(section)
    times = []
    for storage_id in storage_ids:
        started = time.perf_counter()
        manager.list_resources(storage_id)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) the process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def outcomes_after(store: EventStore, start: int, count: int) -> list[Envelope]:
    """The first `count` checkpoint outcomes appended after stream sequence `start`."""
    found: list[Envelope] = []
    async with asyncio.timeout(DEADLINE_S):
        async for stored in store.read(["checkpoint"], start_sequence=start + 1, follow=True):
            if isinstance(payload_of(stored.envelope), ev.CheckpointDeleted | ev.CheckpointPartiallyDeleted):
                found.append(stored.envelope)
                if len(found) == count:
                    return found
    raise AssertionError("unreachable")


async def one_run(
    nats_url: str, folder: Path, backend: str, s3: S3Server | None, args: argparse.Namespace
) -> dict[str, Any]:
    namespace = f"gc{uuid.uuid4().hex[:8]}"
    per_trial = max(1, args.checkpoints // args.trials)
    checkpoints = {
        str(uuid.uuid4()): (n // per_trial + 1, n % per_trial + 1) for n in range(args.checkpoints)
    }
    steps = {storage_id: step for storage_id, (_, step) in checkpoints.items()}
    written = time.monotonic()
    if s3 is None:
        section: dict[str, Any] = {"type": "shared_fs", "host_path": str(folder / namespace)}
        resources = write_shared_fs(folder / namespace, steps, args.files)
    else:
        section = s3.storage(prefix=namespace)
        resources = await asyncio.to_thread(write_s3, s3, section, steps, args.files)
    log(
        f"{backend}: {args.checkpoints} checkpoints x {args.files} files written in {time.monotonic() - written:.1f} s"
    )
    list_ms = await asyncio.to_thread(listing_ms, section, list(checkpoints)[:LISTINGS])
    store = await EventStore.connect(nats_url, namespace)
    try:
        await append_all(store, experiment_events(section, checkpoints, resources))
        with checkpoint_service(nats_url, namespace, folder, args.workers) as service:
            cpu_before = cpu_seconds(service.pid)
            ended = ev.ExperimentStateChanged(
                experiment_id=1, state=ev.ExperimentState.EXPERIMENT_STATE_COMPLETED
            )
            sequence, end = await store.append(Append("experiment/1", ended, "ended-1"), actor="bench")
            outcomes = await outcomes_after(store, sequence, args.checkpoints)
            service_cpu_s = cpu_seconds(service.pid) - cpu_before
        decisions = [
            s.envelope
            async for s in store.read(["experiment"], start_sequence=sequence, follow=False)
            if isinstance(payload_of(s.envelope), ev.CheckpointDeletionRequested)
        ]
    finally:
        await store.close()
    decided_ns = decisions[0].occurred_at_ns
    last_ns = max(e.occurred_at_ns for e in outcomes)
    deleted = sum(1 for e in outcomes if e.WhichOneof("payload") == "checkpoint_deleted")
    seconds = (last_ns - decided_ns) / 1e9
    return {
        "checkpoints": args.checkpoints,
        "files_per_checkpoint": args.files,
        "workers": args.workers,
        "deleted": deleted,
        "partially_deleted": len(outcomes) - deleted,
        "decision_ms": round((decided_ns - end.occurred_at_ns) / 1e6, 1),
        "end_to_last_deleted_s": round((last_ns - end.occurred_at_ns) / 1e9, 3),
        "checkpoints_per_s": round(len(outcomes) / seconds, 1),
        "files_per_s": round(len(outcomes) * args.files / seconds, 1),
        "list_ms": round(list_ms, 2),
        "service_cpu_ms_per_checkpoint": round(service_cpu_s * 1000 / len(outcomes), 3),
        "left_files": files_left(section, s3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoints", type=int, default=10_000)
    parser.add_argument("--files", type=int, default=10)
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--only", choices=BACKENDS)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="det-bench-gc-") as tmp, contextlib.ExitStack() as stack:
        folder = Path(tmp)
        nats = NatsServer(folder / "nats", free_port(), folder / "nats.log")
        process = nats.start()
        stack.callback(process.wait, 10)
        stack.callback(process.terminate)
        for backend in [args.only] if args.only else BACKENDS:
            s3 = stack.enter_context(running_s3_server()) if backend == "s3" else None
            runs = [asyncio.run(one_run(nats.url, folder, backend, s3, args)) for _ in range(args.reps)]
            emit(f"gc_throughput_{backend}", runs)


if __name__ == "__main__":
    main()
