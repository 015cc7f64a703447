"""The agent's side of the flow against a real nats-server: contexts, startup
hooks, set-up failures and an agent restart."""

import asyncio
import json
from pathlib import Path

from test_services_flow import (
    ES,
    TS,
    cluster,
    config,
    create_experiment,
    experiment_ended,
    payloads,
    trial_logs,
    wait_for,
)

from determined.common.context import pack_context
from determined.proto import events_pb2 as ev
from services.agent.__main__ import AgentSettings
from services.agent.__main__ import run as run_agent
from services.agent.notices import runtime_notices
from services.common.eventstore import EventStore


async def test_the_context_is_extracted_and_the_startup_hook_sourced(
    event_store: EventStore, settings: dict[str, object], tmp_path: Path
) -> None:
    context = tmp_path / "context"
    context.mkdir()
    (context / "startup-hook.sh").write_text("export GREETING=hello-from-hook\n")
    (context / "train.py").write_text(
        "import os, determined\n"
        "print(os.environ['GREETING'], os.environ['DET_TRIAL_ID'], os.environ['DET_SLOT_IDS'])\n"
        "assert 'DET_CLUSTER_SECRET' not in os.environ\n"
    )
    digest = await event_store.contexts.put(pack_context(context))
    async with cluster(settings, tmp_path / "work"):
        await create_experiment(
            event_store, 1, config("python3 train.py", max_restarts=0), context_hash=digest
        )
        envelopes = await wait_for(event_store, experiment_ended)
    assert [c.state for c in payloads(envelopes, ev.ExperimentStateChanged)] == [
        ES.EXPERIMENT_STATE_COMPLETED
    ]
    lines = [line.log for b in await trial_logs(event_store, 1) for line in b.lines]
    assert lines == ["hello-from-hook 1 [0]"]
    assert not (tmp_path / "work" / "1.1").exists()  # it ended well: its folder is gone


async def test_a_bad_context_fails_the_allocation_with_a_log_line(
    event_store: EventStore, settings: dict[str, object], tmp_path: Path
) -> None:
    digest = await event_store.contexts.put(b"this is not a tar.gz")
    async with cluster(settings, tmp_path):
        await create_experiment(event_store, 1, config("true", max_restarts=0), context_hash=digest)
        envelopes = await wait_for(event_store, experiment_ended)
    [exited] = payloads(envelopes, ev.AllocationExited)
    assert exited.exit_code == 1 and exited.error
    assert [t.state for t in payloads(envelopes, ev.TrialEnded)] == [TS.TRIAL_STATE_ERROR]
    [batch] = await trial_logs(event_store, 1)
    assert batch.allocation_ended and exited.error in batch.lines[0].log


async def test_a_trial_class_entrypoint_runs_the_harness_under_the_torch_launcher(
    event_store: EventStore, settings: dict[str, object], tmp_path: Path
) -> None:
    """No context: the launcher starts the worker and the harness says what is missing."""
    async with cluster(settings, tmp_path):
        await create_experiment(event_store, 1, config("model_def:MyTrial", max_restarts=0))
        envelopes = await wait_for(event_store, experiment_ended)
    [exited] = payloads(envelopes, ev.AllocationExited)
    assert exited.exit_code != 0
    lines = [line for b in await trial_logs(event_store, 1) for line in b.lines]
    errors = [line for line in lines if "there is no module 'model_def'" in line.log]
    assert len(errors) == 1, [line.log for line in lines]
    [error] = errors
    assert error.HasField("rank") and error.rank == 0  # a worker's line, from wrap_rank


async def test_a_restarted_agent_closes_its_lost_allocation_and_the_trial_is_retried(
    event_store: EventStore, settings: dict[str, object], tmp_path: Path
) -> None:
    go = tmp_path / "go"
    async with cluster(settings, tmp_path / "work") as tasks:
        await create_experiment(event_store, 1, config(f"while [ ! -f {go} ]; do sleep 0.05; done"))
        await wait_for(event_store, lambda es: bool(payloads(es, ev.AllocationStarted)))
        tasks["agent"].cancel()
        await asyncio.gather(tasks["agent"], return_exceptions=True)
        go.touch()
        agent_settings = AgentSettings(**settings, agent_id="agent-1", agent_work_dir=tmp_path / "work")
        tasks["agent"] = asyncio.create_task(run_agent(agent_settings))
        envelopes = await wait_for(event_store, experiment_ended)
    exits = payloads(envelopes, ev.AllocationExited)
    assert [(x.allocation_id, x.exit_code, x.error) for x in exits] == [
        ("1.1", -1, "agent restarted"),
        ("1.2", 0, ""),
    ]
    assert len(payloads(envelopes, ev.AgentRegistered)) == 2
    assert [c.state for c in payloads(envelopes, ev.ExperimentStateChanged)] == [
        ES.EXPERIMENT_STATE_COMPLETED
    ]


async def test_a_command_that_cannot_start_fails_the_allocation(
    event_store: EventStore, settings: dict[str, object], tmp_path: Path
) -> None:
    async with cluster(settings, tmp_path):
        await create_experiment(event_store, 1, config(["/no/such/program"], max_restarts=0))
        envelopes = await wait_for(event_store, experiment_ended)
    [exited] = payloads(envelopes, ev.AllocationExited)
    assert exited.exit_code == 1 and "/no/such/program" in exited.error
    assert [c.state for c in payloads(envelopes, ev.ExperimentStateChanged)] == [ES.EXPERIMENT_STATE_ERROR]


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
