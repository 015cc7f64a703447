"""The gateway's agents and jobs against a real nats-server and PostgreSQL:
agents' pools, addresses and states, what runs on each slot, enabling and
disabling agents, the job queue (GetJobs: as a running scheduler publishes
it), changing a job's priority, weight or max slots, resource pools
checked at create time, and trial logs of one rank."""

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
import pytest
import test_gateway
from google.protobuf.message import Message
from test_gateway import CONFIG, given_trial, logged_in, stored

from determined.proto import api_pb2, api_pb2_grpc, events_pb2
from services.common.envelope import Append
from services.common.eventstore import EventStore
from services.gateway.server import Gateway
from services.scheduler.__main__ import SchedulerSettings
from services.scheduler.__main__ import run as run_scheduler

# test_gateway's started gateway (the api fixture on it comes from conftest.py).
gateway = test_gateway.gateway


async def append(store: EventStore, gateway: Gateway, aggregate: str, payload: Message, msg_id: str) -> str:
    """Appends and waits for the read models; returns the event id."""
    _, envelope = await store.append(Append(aggregate, payload, msg_id), actor="service:test")
    assert await gateway.projector.catch_up()
    return str(envelope.event_id)


async def register(store: EventStore, gateway: Gateway, agent_id: str, slots: int = 2, pool: str = "") -> str:
    payload = events_pb2.AgentRegistered(
        agent_id=agent_id,
        hostname=f"host-{agent_id}",
        resource_pool=pool,
        address=f"10.0.0.{len(agent_id)}",
        slots=[events_pb2.Slot(slot_id=slot, type="cpu") for slot in range(slots)],
    )
    return await append(store, gateway, f"agent/{agent_id}", payload, f"register-{agent_id}-{pool}-{slots}")


async def agents(api: api_pb2_grpc.DeterminedStub) -> dict[str, api_pb2.Agent]:
    return {agent.agent_id: agent for agent in (await api.GetAgents(api_pb2.GetAgentsRequest())).agents}


async def test_agents_show_pool_address_state_and_what_runs_on_each_slot(
    api: api_pb2_grpc.DeterminedStub, event_store: EventStore, gateway: Gateway
) -> None:
    await register(event_store, gateway, "a1")
    registration = await register(event_store, gateway, "gpu-agent", slots=1, pool="gpu")
    await given_trial(event_store, gateway, trial_id=1, experiment_id=4)
    assigned = events_pb2.AllocationAssigned(
        allocation_id="1.1", placements=[events_pb2.Placement(agent_id="a1", slot_ids=[1])]
    )
    await append(event_store, gateway, "allocation/1.1", assigned, "assign-1.1")
    found = await agents(api)
    assert (found["a1"].resource_pool, found["a1"].address, found["a1"].state) == (
        "default",
        "10.0.0.2",
        "ENABLED",
    )
    assert found["gpu-agent"].resource_pool == "gpu"
    assert [
        (use.slot_id, use.allocation_id, use.trial_id, use.experiment_id) for use in found["a1"].slot_uses
    ] == [(0, "", 0, 0), (1, "1.1", 1, 4)]
    lost = events_pb2.AgentLost(
        agent_id="gpu-agent", registration_event_id=registration, reason="no heartbeat"
    )
    await append(event_store, gateway, "agent/gpu-agent", lost, "lost-gpu-agent")
    assert (await agents(api))["gpu-agent"].state == "LOST"
    await append(
        event_store, gateway, "allocation/1.1", events_pb2.AllocationExited(allocation_id="1.1"), "exit-1.1"
    )
    assert not any(use.allocation_id for use in (await agents(api))["a1"].slot_uses)


async def test_agents_are_disabled_drained_and_enabled(
    api: api_pb2_grpc.DeterminedStub, event_store: EventStore, gateway: Gateway
) -> None:
    await register(event_store, gateway, "a1")
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await api.DisableAgent(api_pb2.DisableAgentRequest(agent_id="a1"))  # as determined, who is no admin
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "needs an admin" in str(refused.value.details())
    admin = await logged_in(api)
    assert (
        await api.DisableAgent(api_pb2.DisableAgentRequest(agent_id="a1", drain=True), metadata=admin)
    ).unchanged_reason == ""
    assert (await agents(api))["a1"].state == "DISABLED"  # draining, with nothing left to finish
    again = await api.DisableAgent(api_pb2.DisableAgentRequest(agent_id="a1", drain=True), metadata=admin)
    assert again.unchanged_reason == "Agent a1 is already draining: nothing to do"
    assert (
        await api.DisableAgent(api_pb2.DisableAgentRequest(agent_id="a1"), metadata=admin)
    ).unchanged_reason == ""
    assert (
        await api.EnableAgent(api_pb2.EnableAgentRequest(agent_id="a1"), metadata=admin)
    ).unchanged_reason == ""
    assert (await agents(api))["a1"].state == "ENABLED"
    enabled = await api.EnableAgent(api_pb2.EnableAgentRequest(agent_id="a1"), metadata=admin)
    assert enabled.unchanged_reason == "Agent a1 is already enabled: nothing to do"
    events = [e.WhichOneof("payload") for e in await stored(event_store, "agent")]
    assert events == ["agent_registered", "agent_disabled", "agent_disabled", "agent_enabled"]
    [drained] = [e.agent_disabled for e in await stored(event_store, "agent") if e.agent_disabled.drain]
    assert drained.owner == "admin"
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await api.DisableAgent(api_pb2.DisableAgentRequest(agent_id="nope"), metadata=admin)
    assert raised.value.code() == grpc.StatusCode.NOT_FOUND and "'nope'" in str(raised.value.details())


async def test_an_unknown_resource_pool_is_refused_naming_the_pools(
    api: api_pb2_grpc.DeterminedStub, event_store: EventStore, gateway: Gateway
) -> None:
    await register(event_store, gateway, "gpu-agent", pool="gpu")
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        config = CONFIG + "resources: {resource_pool: tpu}\n"
        await api.CreateExperiment(api_pb2.CreateExperimentRequest(config_yaml=config))
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "'tpu' is not a resource pool of this cluster; the pools are: default, gpu" in str(
        raised.value.details()
    )
    config = CONFIG + "resources: {resource_pool: gpu}\n"
    assert (
        await api.CreateExperiment(api_pb2.CreateExperimentRequest(config_yaml=config))
    ).experiment_id == 1


async def test_a_job_is_updated_validated_and_refused_when_unknown_or_ended(
    api: api_pb2_grpc.DeterminedStub, event_store: EventStore, gateway: Gateway
) -> None:
    await api.CreateExperiment(api_pb2.CreateExperimentRequest(config_yaml=CONFIG, activate=True))
    assert (
        await api.UpdateJob(api_pb2.UpdateJobRequest(job_id="experiment/1", priority=10))
    ).unchanged_reason == ""
    assert (
        await api.UpdateJob(api_pb2.UpdateJobRequest(job_id="1", max_slots=2, weight=2.0))
    ).unchanged_reason == ""
    same = await api.UpdateJob(api_pb2.UpdateJobRequest(job_id="1", priority=10))
    assert same.unchanged_reason == "Job experiment/1 has these values already: nothing to change"
    changes = [
        e.job_resources_changed
        for e in await stored(event_store, "experiment")
        if e.HasField("job_resources_changed")
    ]
    assert [(c.job_id, c.HasField("priority"), c.HasField("weight"), c.max_slots) for c in changes] == [
        ("experiment/1", True, False, 0),
        ("experiment/1", False, True, 2),
    ]
    experiment = (await api.GetExperiment(api_pb2.GetExperimentRequest(experiment_id=1))).experiment
    resources = json.loads(experiment.config_json)["resources"]
    assert (resources["priority"], resources["weight"], resources["max_slots"]) == (10, 2.0, 2)
    for bad in (
        api_pb2.UpdateJobRequest(job_id="1", priority=0),
        api_pb2.UpdateJobRequest(job_id="1", weight=0),
        api_pb2.UpdateJobRequest(job_id="1", max_slots=-1),
        api_pb2.UpdateJobRequest(job_id="1"),
        api_pb2.UpdateJobRequest(job_id="trial/1", priority=3),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await api.UpdateJob(bad)
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await api.UpdateJob(api_pb2.UpdateJobRequest(job_id="9", priority=3))
    assert raised.value.code() == grpc.StatusCode.NOT_FOUND
    await api.KillExperiment(api_pb2.KillExperimentRequest(experiment_id=1))
    ended = events_pb2.ExperimentStateChanged(experiment_id=1, state=events_pb2.EXPERIMENT_STATE_CANCELED)
    await append(event_store, gateway, "experiment/1", ended, "ended-1")
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await api.UpdateJob(api_pb2.UpdateJobRequest(job_id="1", priority=3))
    assert raised.value.code() == grpc.StatusCode.NOT_FOUND and "CANCELED" in str(raised.value.details())


def requested(allocation_id: str, experiment_id: int, slots: int, pool: str = "") -> Append:
    trial_id = int(allocation_id.split(".")[0])
    launch = events_pb2.TrialLaunch(experiment_id=experiment_id, trial_id=trial_id, trial_run_id=1)
    payload = events_pb2.AllocationRequested(
        allocation_id=allocation_id,
        task_id=str(trial_id),
        task_type="TRIAL",
        trial=launch,
        slots=slots,
        resource_pool=pool,
        job_id=f"experiment/{experiment_id}",
    )
    return Append(f"allocation/{allocation_id}", payload, f"requested-{allocation_id}")


@asynccontextmanager
async def scheduler(gateway: Gateway, ready_file: Path) -> AsyncIterator[None]:
    """The scheduler service (a priority scheduler for the pool `gpu`, default
    priority 7), caught up: it publishes the job queue the gateway shows."""
    settings = SchedulerSettings(
        nats_url=gateway.settings.nats_url,
        namespace=gateway.settings.namespace,
        ready_file=ready_file,
        scheduler_pool_types="gpu=priority",
        scheduler_default_priority=7,
    )
    task = asyncio.create_task(run_scheduler(settings))
    try:
        while not ready_file.exists():
            assert not task.done(), task
            await asyncio.sleep(0.02)
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_the_job_queue_is_the_schedulers_with_names_and_owners(
    api: api_pb2_grpc.DeterminedStub, event_store: EventStore, gateway: Gateway, tmp_path: Path
) -> None:
    assert not (await api.GetJobs(api_pb2.GetJobsRequest())).jobs  # nothing published yet
    await register(event_store, gateway, "a1", slots=2)
    await register(event_store, gateway, "g1", slots=1, pool="gpu")
    for _ in range(2):
        await api.CreateExperiment(api_pb2.CreateExperimentRequest(config_yaml=CONFIG, activate=True))
    async with scheduler(gateway, tmp_path / "scheduler.ready"):
        await event_store.append(requested("1.1", 1, 2), actor="service:searcher")
        await event_store.append(requested("2.1", 2, 4), actor="service:searcher")
        # Answered once the scheduler published what it made of both (it assigned the first).
        response = await api.GetJobs(api_pb2.GetJobsRequest())
        assert dict(response.schedulers) == {"default": "fair_share", "gpu": "priority"}
        by_id = {job.job_id: job for job in response.jobs}
        first, second = by_id["experiment/1"], by_id["experiment/2"]
        assert (first.type, first.experiment_id, first.owner, first.state) == (
            "EXPERIMENT",
            1,
            "determined",
            "SCHEDULED",
        )
        assert first.name.startswith("Experiment (") and (first.slots_acquired, first.slots_needed) == (2, 2)
        assert (second.state, second.slots_acquired, second.slots_needed) == ("QUEUED", 0, 4)
        assert second.waiting_reason and sorted(job.position for job in response.jobs) == [1, 2]
        await api.UpdateJob(api_pb2.UpdateJobRequest(job_id="2", weight=3.0))
        again = {job.job_id: job for job in (await api.GetJobs(api_pb2.GetJobsRequest())).jobs}
        assert again["experiment/2"].weight == 3.0
        assert again["experiment/2"].priority == 7  # the scheduler's default
        unchanged = await api.UpdateJob(api_pb2.UpdateJobRequest(job_id="2", priority=7))
        assert "nothing to change" in unchanged.unchanged_reason
        gpu = await api.GetJobs(api_pb2.GetJobsRequest(resource_pool="gpu"))
        assert not gpu.jobs and dict(gpu.schedulers) == {"gpu": "priority"}


async def test_master_tells_agents_where_nats_is(api: api_pb2_grpc.DeterminedStub, gateway: Gateway) -> None:
    master = await api.GetMaster(api_pb2.GetMasterRequest())
    assert (master.nats_url, master.namespace) == (gateway.settings.nats_url, gateway.settings.namespace)


async def test_trial_logs_of_one_rank(
    api: api_pb2_grpc.DeterminedStub, event_store: EventStore, gateway: Gateway
) -> None:
    await given_trial(event_store, gateway)
    lines = [
        events_pb2.LogLine(timestamp_ns=1, log="chief", rank=0),
        events_pb2.LogLine(timestamp_ns=2, log="w1", rank=1),
        events_pb2.LogLine(timestamp_ns=3, log="no rank"),
    ]
    await event_store.logs.publish(
        events_pb2.LogBatch(trial_id=1, allocation_id="1.1", agent_id="a1", lines=lines)
    )
    every = [line.log async for r in api.TrialLogs(api_pb2.TrialLogsRequest(trial_id=1)) for line in r.lines]
    ranked = [
        line.log
        async for r in api.TrialLogs(api_pb2.TrialLogsRequest(trial_id=1, rank=1))
        for line in r.lines
    ]
    none = [
        line.log
        async for r in api.TrialLogs(api_pb2.TrialLogsRequest(trial_id=1, rank=5))
        for line in r.lines
    ]
    assert (every, ranked, none) == (["chief", "w1", "no rank"], ["w1"], [])


async def test_following_a_gang_s_logs_ends_after_every_agent_s_last_batch(
    api: api_pb2_grpc.DeterminedStub, event_store: EventStore, gateway: Gateway
) -> None:
    """Each agent of a gang closes its own part of the logs: the first closing
    batch is not the end when another agent's comes after it."""
    await given_trial(event_store, gateway)
    for agent_id, log in [("a1", "a1 bye"), ("a2", "a2 bye")]:
        line = events_pb2.LogLine(timestamp_ns=1, log=log)
        await event_store.logs.publish(
            events_pb2.LogBatch(
                trial_id=1, allocation_id="1.1", agent_id=agent_id, lines=[line], allocation_ended=True
            )
        )
    ended = events_pb2.TrialEnded(trial_id=1, experiment_id=1, state=events_pb2.TRIAL_STATE_COMPLETED)
    await append(event_store, gateway, "trial/1", ended, "end-1")
    followed = [
        line.log
        async for r in api.TrialLogs(api_pb2.TrialLogsRequest(trial_id=1, follow=True))
        for line in r.lines
    ]
    assert followed == ["a1 bye", "a2 bye"]
