"""The agent ships a trial's logs across a NATS outage: nats-server (a
private one, stopped and started again on the same port and store) goes away
while the trial prints; the trial runs on, and every line arrives afterwards,
in order, once."""

import asyncio
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from test_services_flow import (
    ES,
    cluster,
    config,
    create_experiment,
    experiment_ended,
    payloads,
    trial_logs,
    wait_for,
)

from deploy.local.servers import NatsServer, free_port
from determined.proto import events_pb2 as ev
from services.agent.logs import SPILL_FILE
from services.common.eventstore import EventStore

LINES = 300
# Longer than a publish waits for its acknowledgement (10 s): the shipper retries.
OUTAGE_S = 12
# Prints LINES numbered lines; waits for `resume` half-way, so that the outage falls in
# the middle of its output; says when it is done.
PRINTER = (
    "import os, sys, time\n"
    "for i in range({lines}):\n"
    "    print(f'line {{i}}', flush=True)\n"
    "    if i == {lines} // 2:\n"
    "        open('{half}', 'w').close()\n"
    "        while not os.path.exists('{resume}'):\n"
    "            time.sleep(0.01)\n"
    "    time.sleep(0.002)\n"
    "open('{done}', 'w').close()\n"
)


@pytest.fixture
def nats(tmp_path: Path) -> Iterator[NatsServer]:
    server = NatsServer(tmp_path / "nats-store", free_port(), tmp_path / "nats.log")
    process = server.start()
    server.process = process  # type: ignore[attr-defined]
    yield server
    server.process.terminate()  # type: ignore[attr-defined]
    server.process.wait(10)  # type: ignore[attr-defined]


async def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


def stop(server: NatsServer) -> None:
    process: subprocess.Popen[bytes] = server.process  # type: ignore[attr-defined]
    process.terminate()
    process.wait(10)


async def test_logs_written_while_nats_is_down_arrive_in_order_once(nats: NatsServer, tmp_path: Path) -> None:
    # 2 KiB of output in memory at most: the rest waits in a file.
    settings = {"nats_url": nats.url, "namespace": "det", "cluster_secret": "test-secret"}
    half, resume, done = tmp_path / "half", tmp_path / "resume", tmp_path / "done"
    script = PRINTER.format(lines=LINES, half=half, resume=resume, done=done)
    store = await EventStore.connect(nats.url)
    try:
        async with cluster(settings, tmp_path / "work", agent_log_memory_bytes=2048):
            await create_experiment(store, 1, config(["python3", "-c", script], max_restarts=0))
            await until(half.exists, "the trial to print its first half")
            stop(nats)
            resume.touch()  # the trial prints its second half while nats-server is down
            await until(done.exists, "the trial to print its second half")
            assert (tmp_path / "work" / "1.1" / SPILL_FILE).is_file()
            await asyncio.sleep(OUTAGE_S)
            nats.process = nats.start()  # type: ignore[attr-defined]
            envelopes = await wait_for(store, experiment_ended)
            batches = await trial_logs(store, 1)
    finally:
        await store.close()
    assert [c.state for c in payloads(envelopes, ev.ExperimentStateChanged)] == [
        ES.EXPERIMENT_STATE_COMPLETED
    ]
    stdout = [line.log for b in batches for line in b.lines if line.stdtype == "stdout"]
    assert stdout == [f"line {i}" for i in range(LINES)]
    assert [b.allocation_ended for b in batches].count(True) == 1 and batches[-1].allocation_ended
