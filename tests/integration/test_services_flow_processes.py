"""Each service as its own process: ready file once caught up, clean SIGTERM."""

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from determined.proto import events_pb2 as ev
from services.common.envelope import Append
from services.common.eventstore import EventStore

SERVICES = ["searcher", "scheduler", "agent", "checkpoint"]
DEADLINE_S = 30.0


def start(service: str, nats_url: str, namespace: str, folder: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "DET_NATS_URL": nats_url,
        "DET_NAMESPACE": namespace,
        "DET_READY_FILE": str(folder / f"{service}.ready"),
        "DET_AGENT_WORK_DIR": str(folder / "work"),
        "DET_LOG_FILE": str(folder / f"{service}.log"),
    }
    return subprocess.Popen([sys.executable, "-m", f"services.{service}"], env=env, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("with_history", [False, True], ids=["empty-log", "with-history"])
async def test_services_get_ready_and_stop_on_sigterm(
    event_store: EventStore, nats_url: str, namespace: str, tmp_path: Path, with_history: bool
) -> None:
    if with_history:
        created = ev.ExperimentCreated(experiment_id=1, config_json="{}", activate=False)
        await event_store.append(Append("experiment/1", created, "created-1"), actor="user:determined")
        checkpoint = ev.CheckpointReported(uuid="c", trial_id=1)
        await event_store.append(Append("checkpoint/c", checkpoint, "checkpoint-c"), actor="trial:1")
    processes = {s: start(s, nats_url, namespace, tmp_path) for s in SERVICES}
    try:
        deadline = time.monotonic() + DEADLINE_S
        while not all((tmp_path / f"{s}.ready").exists() for s in SERVICES):
            exited = {s: p.returncode for s, p in processes.items() if p.poll() is not None}
            assert not exited and time.monotonic() < deadline, f"not ready; exited: {exited}"
            await asyncio.sleep(0.05)
        for process in processes.values():
            process.send_signal(signal.SIGTERM)
        assert {s: p.wait(DEADLINE_S) for s, p in processes.items()} == dict.fromkeys(SERVICES, 0)
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.kill()
                process.wait()
