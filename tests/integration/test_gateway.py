"""The gateway against a real nats-server and PostgreSQL: its gRPC API, its
commands' events and its read models."""

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import cast

import grpc
import pytest

from deploy.local.servers import free_port
from determined.proto import api_pb2, api_pb2_grpc, events_pb2
from services.common.envelope import Append
from services.common.eventlog import StoredEvent
from services.common.eventstore import EventStore
from services.common.tokens import mint_allocation_token
from services.gateway.auth import UserPrincipal
from services.gateway.server import Gateway, PortInUseError
from services.gateway.settings import GatewaySettings

SECRET = "test-secret"
# A new cluster's first events: its built-in users admin and determined (UserCreated).
BUILT_IN_USER_EVENTS = 2
CONFIG = """
entrypoint: python3 train.py
searcher: {name: single, metric: loss, max_length: 10}
hyperparameters: {lr: 0.1}
"""


@pytest.fixture
async def gateway(nats_url: str, namespace: str, database_url: str) -> AsyncIterator[Gateway]:
    settings = GatewaySettings(
        nats_url=nats_url,
        namespace=namespace,
        database_url=database_url,
        gateway_port=free_port(),
        gateway_host="127.0.0.1",
        cluster_secret=SECRET,
        cluster_id="test-cluster",
        grace_period_s=0.1,
        allow_anonymous=True,
        allow_blank_password=True,
    )
    started = await Gateway.start(settings)
    yield started
    await started.stop()


async def logged_in(
    api: api_pb2_grpc.DeterminedStub, username: str = "admin", password: str = ""
) -> tuple[tuple[str, str], ...]:
    """The metadata of calls made as `username` (the fixture's users have a blank password)."""
    response = await api.Login(api_pb2.LoginRequest(username=username, password=password))
    return (("authorization", f"Bearer {response.token}"),)


def trial_metadata(trial_id: int, secret: str = SECRET) -> tuple[tuple[str, str], ...]:
    return (("x-allocation-token", mint_allocation_token(secret, trial_id, f"{trial_id}.1")),)


async def until(condition: Callable[[], Awaitable[bool]], deadline_s: float = 10.0) -> None:
    end = time.monotonic() + deadline_s
    while not await condition():
        assert time.monotonic() < end, "condition not met before the deadline"
        await asyncio.sleep(0.02)


async def stored(store: EventStore, kind: str) -> list[events_pb2.Envelope]:
    """The stored events of one aggregate kind (reads the whole log up to its end)."""
    last = await store.last_sequence()
    found: list[events_pb2.Envelope] = []
    if last == 0:
        return found
    async with contextlib.aclosing(cast(AsyncGenerator[StoredEvent, None], store.read(None))) as events:
        async for event in events:
            if event.envelope.aggregate.startswith(f"{kind}/"):
                found.append(event.envelope)
            if event.sequence >= last:
                return found
    return found


def run_requested(trial_id: int, run_id: int, resumed_at: int = 0, experiment_id: int = 1) -> Append:
    """The request of a trial's run, as its lifecycle appends it."""
    allocation_id = f"{trial_id}.{run_id}"
    launch = events_pb2.TrialLaunch(
        experiment_id=experiment_id, trial_id=trial_id, trial_run_id=run_id, steps_completed=resumed_at
    )
    payload = events_pb2.AllocationRequested(
        allocation_id=allocation_id, task_id=str(trial_id), task_type="TRIAL", trial=launch
    )
    return Append(f"allocation/{allocation_id}", payload, f"allocation-requested-{allocation_id}")


async def given_trial(store: EventStore, gateway: Gateway, trial_id: int = 1, experiment_id: int = 1) -> None:
    """A trial with its first run (allocation <trial>.1, the one trial_metadata's token names) requested."""
    payload = events_pb2.TrialCreated(
        trial_id=trial_id, experiment_id=experiment_id, hparams_json='{"lr": 0.1}'
    )
    await store.append(Append(f"trial/{trial_id}", payload, f"trial-{trial_id}"), actor="service:searcher")
    await store.append(run_requested(trial_id, 1, experiment_id=experiment_id), actor="service:searcher")
    assert await gateway.projector.catch_up()


async def test_create_appends_and_projects(api: api_pb2_grpc.DeterminedStub, event_store: EventStore) -> None:
    created = await api.CreateExperiment(
        api_pb2.CreateExperimentRequest(config_yaml=CONFIG, context_tgz=b"tgz", activate=True)
    )
    assert created.experiment_id == 1
    assert json.loads(created.config_json)["entrypoint"] == "python3 train.py"
    [created_event] = await stored(event_store, "experiment")
    assert created_event.experiment_created.context_hash
    assert created_event.actor == "user:determined"
    response = await api.GetExperiment(api_pb2.GetExperimentRequest(experiment_id=1))
    assert response.experiment.state == "ACTIVE"
    assert response.experiment.name.startswith("Experiment (")
    assert response.experiment.searcher_metric == "loss"
    assert response.experiment.started_at_ns == created_event.occurred_at_ns
    listed = await api.GetExperiments(api_pb2.GetExperimentsRequest())
    assert [e.id for e in listed.experiments] == [1]


async def test_a_retried_create_answers_with_the_first_experiment(
    api: api_pb2_grpc.DeterminedStub, event_store: EventStore
) -> None:
    request = api_pb2.CreateExperimentRequest(config_yaml=CONFIG, activate=True, request_id="cli-retry-1")
    first = await api.CreateExperiment(request)
    again = await api.CreateExperiment(request)
    assert first.experiment_id == again.experiment_id == 1
    assert len(await stored(event_store, "experiment")) == 1
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await api.CreateExperiment(api_pb2.CreateExperimentRequest(config_yaml=CONFIG, request_id="a b"))
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "request_id" in (raised.value.details() or "")


async def test_a_paused_experiment_is_activated_once(
    api: api_pb2_grpc.DeterminedStub, gateway: Gateway, event_store: EventStore
) -> None:
    await api.CreateExperiment(api_pb2.CreateExperimentRequest(config_yaml=CONFIG, activate=False))
    request = api_pb2.ActivateExperimentRequest(experiment_id=1)
    await api.ActivateExperiment(request)
    assert await gateway.projector.catch_up()
    await api.ActivateExperiment(request)  # active already: nothing more
    kinds = [e.WhichOneof("payload") for e in await stored(event_store, "experiment")]
    assert kinds == ["experiment_created", "experiment_state_changed"]
    assert (
        await api.GetExperiment(api_pb2.GetExperimentRequest(experiment_id=1))
    ).experiment.state == "ACTIVE"
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await api.ActivateExperiment(api_pb2.ActivateExperimentRequest(experiment_id=9))
    assert raised.value.code() == grpc.StatusCode.NOT_FOUND


async def test_the_same_context_is_stored_once(
    api: api_pb2_grpc.DeterminedStub, event_store: EventStore
) -> None:
    request = api_pb2.CreateExperimentRequest(config_yaml=CONFIG, context_tgz=b"same folder", activate=True)
    await api.CreateExperiment(request)
    await api.CreateExperiment(request)
    first, second = await stored(event_store, "experiment")
    digest = first.experiment_created.context_hash
    assert second.experiment_created.context_hash == digest
    bucket = await event_store.js.object_store(event_store.contexts.bucket)
    assert [info.name for info in await bucket.list()] == [digest]


async def test_bad_config_appends_nothing(api: api_pb2_grpc.DeterminedStub, event_store: EventStore) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        bad = "entrypoint: x\nsearcher: {name: nope}\nmax_restarts: -1\n"
        await api.CreateExperiment(api_pb2.CreateExperimentRequest(config_yaml=bad))
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    details = raised.value.details() or ""
    assert "searcher.name" in details and "max_restarts" in details
    assert await event_store.last_sequence() == BUILT_IN_USER_EVENTS


async def test_validate_only_stores_nothing(
    api: api_pb2_grpc.DeterminedStub, event_store: EventStore
) -> None:
    response = await api.CreateExperiment(
        api_pb2.CreateExperimentRequest(config_yaml=CONFIG, validate_only=True)
    )
    assert response.experiment_id == 0 and response.config_json
    assert await event_store.last_sequence() == BUILT_IN_USER_EVENTS


async def test_concurrent_creates_get_distinct_ids(api: api_pb2_grpc.DeterminedStub) -> None:
    request = api_pb2.CreateExperimentRequest(config_yaml=CONFIG, activate=True)
    responses = await asyncio.gather(*[api.CreateExperiment(request) for _ in range(4)])
    assert sorted(r.experiment_id for r in responses) == [1, 2, 3, 4]


async def test_retried_create_is_stored_once(gateway: Gateway, event_store: EventStore) -> None:
    request = api_pb2.CreateExperimentRequest(config_yaml=CONFIG)
    principal = UserPrincipal("determined")
    first = await gateway.api.experiments.create_experiment(request, request_id="r1", principal=principal)
    again = await gateway.api.experiments.create_experiment(request, request_id="r1", principal=principal)
    assert first.experiment_id == again.experiment_id == 1
    assert await event_store.last_sequence() == BUILT_IN_USER_EVENTS + 1


async def test_kill(api: api_pb2_grpc.DeterminedStub) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await api.KillExperiment(api_pb2.KillExperimentRequest(experiment_id=7))
    assert raised.value.code() == grpc.StatusCode.NOT_FOUND
    await api.CreateExperiment(api_pb2.CreateExperimentRequest(config_yaml=CONFIG, activate=False))
    await api.KillExperiment(api_pb2.KillExperimentRequest(experiment_id=1))

    async def killed() -> bool:
        response = await api.GetExperiment(api_pb2.GetExperimentRequest(experiment_id=1))
        return response.experiment.state == "STOPPING_KILLED"

    await until(killed)


async def test_metrics_batch_is_stored_once(
    api: api_pb2_grpc.DeterminedStub, gateway: Gateway, event_store: EventStore
) -> None:
    await given_trial(event_store, gateway)
    reports = [
        events_pb2.MetricReport(group="training", steps_completed=s, metrics_json='{"loss": 0.5}')
        for s in (10, 20)
    ]
    request = api_pb2.ReportMetricsRequest(trial_id=1, trial_run_id=1, batch_seq=1, reports=reports)
    await api.ReportMetrics(request, metadata=trial_metadata(1))
    await api.ReportMetrics(request, metadata=trial_metadata(1))
    assert len(await stored(event_store, "metrics")) == 1
    assert await gateway.projector.catch_up()
    trial = (await api.GetTrial(api_pb2.GetTrialRequest(trial_id=1))).trial
    assert trial.latest_training.steps_completed == 20 and trial.total_batches == 20
    rows = await gateway.pool.fetchval("SELECT count(*) FROM read_model.metrics")
    assert rows == 2


async def test_tokens_are_good_for_their_own_trial_only(
    api: api_pb2_grpc.DeterminedStub, gateway: Gateway, event_store: EventStore
) -> None:
    await given_trial(event_store, gateway, trial_id=2)
    request = api_pb2.ReportProgressRequest(trial_id=2, progress=0.5, reporter_id="r", seq=1)
    cases = [
        (trial_metadata(1), grpc.StatusCode.PERMISSION_DENIED),
        ((), grpc.StatusCode.PERMISSION_DENIED),
        (trial_metadata(2, secret="wrong"), grpc.StatusCode.UNAUTHENTICATED),
    ]
    for metadata, code in cases:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await api.ReportProgress(request, metadata=metadata)
        assert raised.value.code() == code
    await api.ReportProgress(request, metadata=trial_metadata(2))


async def test_trial_reports_reach_get_trial(
    api: api_pb2_grpc.DeterminedStub, gateway: Gateway, event_store: EventStore
) -> None:
    await given_trial(event_store, gateway)
    await api.ReportProgress(
        api_pb2.ReportProgressRequest(trial_id=1, progress=0.25, reporter_id="r", seq=1),
        metadata=trial_metadata(1),
    )
    checkpoint = api_pb2.ReportCheckpointRequest(
        uuid="c-1", trial_id=1, allocation_id="1.1", steps_completed=5, metadata_json="{}", resources={"a": 3}
    )
    await api.ReportCheckpoint(checkpoint, metadata=trial_metadata(1))
    assert await gateway.projector.catch_up()
    response = await api.GetTrial(api_pb2.GetTrialRequest(trial_id=1))
    assert response.trial.progress == 0.25 and response.trial.state == "ACTIVE"
    assert response.trial.latest_checkpoint.uuid == "c-1"
    assert [c.resources["a"] for c in response.checkpoints] == [3]
    [reported] = await stored(event_store, "checkpoint")
    assert reported.checkpoint_reported.experiment_id == 1


async def test_the_same_progress_reported_again_later_is_stored_again_and_a_retry_once(
    api: api_pb2_grpc.DeterminedStub, gateway: Gateway, event_store: EventStore
) -> None:
    await given_trial(event_store, gateway)

    def report(seq: int, progress: float, reporter_id: str = "r") -> api_pb2.ReportProgressRequest:
        return api_pb2.ReportProgressRequest(trial_id=1, progress=progress, reporter_id=reporter_id, seq=seq)

    for request in (report(1, 0.5), report(2, 0.25), report(3, 0.5), report(2, 0.25), report(1, 0.5, "s")):
        await api.ReportProgress(request, metadata=trial_metadata(1))
    progress = [e.trial_progress_reported.progress for e in await stored(event_store, "trial")]
    assert [p for p in progress if p] == [0.5, 0.25, 0.5, 0.5]  # the retry of report 2 stored once
    assert await gateway.projector.catch_up()
    assert (await api.GetTrial(api_pb2.GetTrialRequest(trial_id=1))).trial.progress == 0.5


async def test_trial_logs_follow_ends_with_the_trial(
    api: api_pb2_grpc.DeterminedStub, gateway: Gateway, event_store: EventStore
) -> None:
    await given_trial(event_store, gateway)
    lines = [events_pb2.LogLine(log="hello"), events_pb2.LogLine(log="bye")]
    await event_store.logs.publish(events_pb2.LogBatch(trial_id=1, allocation_id="1.1", lines=lines[:1]))
    assert await _collect(api.TrialLogs(api_pb2.TrialLogsRequest(trial_id=1))) == ["hello"]
    following = asyncio.create_task(
        _collect(api.TrialLogs(api_pb2.TrialLogsRequest(trial_id=1, follow=True)))
    )
    ended = events_pb2.TrialEnded(trial_id=1, experiment_id=1, state=events_pb2.TRIAL_STATE_COMPLETED)
    await event_store.append(Append("trial/1", ended, "end-1"), actor="service:scheduler")
    assert await gateway.projector.catch_up()
    last = events_pb2.LogBatch(trial_id=1, allocation_id="1.1", lines=lines[1:], allocation_ended=True)
    await event_store.logs.publish(last)
    assert await asyncio.wait_for(following, 10) == ["hello", "bye"]
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await _collect(api.TrialLogs(api_pb2.TrialLogsRequest(trial_id=9)))
    assert raised.value.code() == grpc.StatusCode.NOT_FOUND


async def test_master_and_agents(
    api: api_pb2_grpc.DeterminedStub, event_store: EventStore, gateway: Gateway
) -> None:
    assert (await api.GetMaster(api_pb2.GetMasterRequest())).cluster_id == "test-cluster"
    slots = [events_pb2.Slot(slot_id=0, type="cpu")]
    registered = events_pb2.AgentRegistered(agent_id="a1", hostname="h", slots=slots)
    await event_store.append(Append("agent/a1", registered, "agent-a1"), actor="service:agent")
    assert await gateway.projector.catch_up()
    [agent] = (await api.GetAgents(api_pb2.GetAgentsRequest())).agents
    assert agent.agent_id == "a1" and agent.slots[0].type == "cpu"


async def test_port_in_use_is_refused(gateway: Gateway) -> None:
    settings = gateway.settings.model_copy(update={"gateway_port": gateway.port})
    with pytest.raises(PortInUseError, match=str(gateway.port)):
        await Gateway.start(settings)


async def _collect(stream: AsyncIterator[api_pb2.TrialLogsResponse]) -> list[str]:
    return [line.log async for response in stream for line in response.lines]
