"""The operators' view of the log: `python -m services.eventlog`."""

import asyncio
import json
import sys

from determined.proto import events_pb2
from services.common.envelope import Append
from services.common.eventstore import EventStore


async def test_the_log_prints_as_json_lines(event_store: EventStore, nats_url: str, namespace: str) -> None:
    created = events_pb2.ExperimentCreated(experiment_id=1, name="first")
    await event_store.append(Append("experiment/1", created, "create-1"), actor="user:determined")
    await event_store.append(
        Append("trial/1", events_pb2.TrialCreated(trial_id=1), "trial-1"), actor="service:s"
    )
    command = [sys.executable, "-m", "services.eventlog", "--nats-url", nats_url, "--namespace", namespace]
    everything = await output(*command)
    trials = await output(*command, "--kind", "trial")
    lines = [json.loads(line) for line in everything.splitlines()]
    assert [(e["sequence"], e["event_id"]) for e in lines] == [(1, "create-1"), (2, "trial-1")]
    assert lines[0]["experiment_created"] == {"experiment_id": "1", "name": "first"}
    assert [json.loads(line)["event_id"] for line in trials.splitlines()] == ["trial-1"]


async def output(*command: str) -> str:
    process = await asyncio.create_subprocess_exec(*command, stdout=asyncio.subprocess.PIPE)
    stdout, _ = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0
    return stdout.decode()
