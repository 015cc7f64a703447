"""A config that asks for what only a container gives, run by a process
agent: the trial's log starts by saying what is not used, and it runs."""

import json
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

from determined.proto import events_pb2 as ev
from services.agent.notices import runtime_notices
from services.common.eventstore import EventStore


@pytest.fixture
def settings(nats_url: str, namespace: str) -> dict[str, object]:
    return {"nats_url": nats_url, "namespace": namespace, "cluster_secret": "test-secret"}


async def test_a_process_agent_says_what_of_the_config_it_does_not_use(
    event_store: EventStore, settings: dict[str, object], tmp_path: Path
) -> None:
    cfg = config(
        "echo trained",
        max_restarts=0,
        environment={"image": "pytorch/pytorch:2.4"},
        bind_mounts=[{"host_path": "/data", "container_path": "/data"}],
    )
    async with cluster(settings, tmp_path):
        await create_experiment(event_store, 1, cfg)
        envelopes = await wait_for(event_store, experiment_ended)
    assert [c.state for c in payloads(envelopes, ev.ExperimentStateChanged)] == [
        ES.EXPERIMENT_STATE_COMPLETED
    ]
    lines = [line.log for b in await trial_logs(event_store, 1) for line in b.lines]
    [launch] = [p.trial for p in payloads(envelopes, ev.AllocationRequested)]
    notices = [f"determined agent: {n}" for n in runtime_notices(json.loads(launch.config_json), "process")]
    assert len(notices) == 2 and lines == [*notices, "trained"]
    assert "environment.image" in notices[0] and "bind_mounts" in notices[1]
