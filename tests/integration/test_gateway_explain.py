"""det events explain through a real gateway (one for the module, real
nats-server and PostgreSQL): alice's experiment, whose trial the services'
events (appended here as they would append them) cut at rung 0, explained
over gRPC, HTTP and the CLI; who may explain what; what is refused."""

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc
import httpx
import pytest
from google.protobuf.message import Message
from support import module_gateway
from support.security_gateway import PASSWORD

from determined.cli.__main__ import main
from determined.common.passwords import salted_hash
from determined.proto import api_pb2, api_pb2_grpc
from determined.proto import events_pb2 as ev
from services.common.envelope import Append
from services.common.eventstore import EventStore
from services.gateway.features.events.explain_service import MAX_ID_CHARS
from services.gateway.server import Gateway

Metadata = tuple[tuple[str, str], ...]
CONFIG = "entrypoint: python3 train.py\nsearcher: {name: single, metric: loss, max_length: 10}\n"
CUT = "cut at rung 0 (4 batches): loss 0.9 not in the top 1/4 of 2"

module_namespace = module_gateway.module_namespace
gateway = module_gateway.gateway
store = module_gateway.store


@dataclass(frozen=True)
class Cluster:
    admin: Metadata
    alice: Metadata
    bob: Metadata
    experiment_id: int
    trial_id: int


@pytest.fixture(scope="module")
async def stub(gateway: Gateway) -> AsyncIterator[api_pb2_grpc.DeterminedStub]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{gateway.port}") as channel:
        yield api_pb2_grpc.DeterminedStub(channel)


async def login(stub: api_pb2_grpc.DeterminedStub, username: str) -> Metadata:
    request = api_pb2.LoginRequest(username=username, password=salted_hash(PASSWORD), is_hashed=True)
    return (("authorization", f"Bearer {(await stub.Login(request)).token}"),)


@pytest.fixture(scope="module")
async def cluster(stub: api_pb2_grpc.DeterminedStub, store: EventStore, gateway: Gateway) -> Cluster:
    admin = await login(stub, "admin")
    for name in ("alice", "bob"):
        request = api_pb2.CreateUserRequest(username=name, password=salted_hash(PASSWORD), is_hashed=True)
        await stub.CreateUser(request, metadata=admin)
    alice = await login(stub, "alice")
    created = api_pb2.CreateExperimentRequest(config_yaml=CONFIG, activate=False)
    experiment_id = (await stub.CreateExperiment(created, metadata=alice)).experiment_id
    await _a_trial_is_cut(store, experiment_id)
    assert await gateway.projector.catch_up()
    return Cluster(admin, alice, await login(stub, "bob"), experiment_id, 1)


async def _a_trial_is_cut(store: EventStore, experiment_id: int) -> None:
    """Trial 1's chain as the searcher, the scheduler, the agent and the trial append it."""
    creation = [s async for s in store.read(aggregates=[f"experiment/{experiment_id}"], follow=False)]
    cause = creation[0].envelope.event_id

    async def append(name: str, payload: Message, event_id: str, actor: str, answers: str = "") -> None:
        await store.append(Append(name, payload, event_id, causation_id=answers), actor=actor)

    trial = ev.TrialCreated(
        trial_id=1, experiment_id=experiment_id, reason="ASHA: a new trial for rung 0 (4 batches)"
    )
    await append("trial/1", trial, "created-1", "service:searcher", cause)
    launch = ev.TrialLaunch(experiment_id=experiment_id, trial_id=1, trial_run_id=1)
    requested = ev.AllocationRequested(
        allocation_id="1.1", task_id="1", task_type="TRIAL", slots=1, job_id=f"experiment/{experiment_id}",
        reason="trial 1's first run", trial=launch,
    )  # fmt: skip
    await append("allocation/1.1", requested, "requested-1.1", "service:searcher", "created-1")
    placement = ev.Placement(agent_id="agent-1", slot_ids=[0])
    assigned = ev.AllocationAssigned(
        allocation_id="1.1", task_id="1", placements=[placement], reason="best fit"
    )
    await append("allocation/1.1", assigned, "assigned-1.1", "service:scheduler", "requested-1.1")
    started = ev.AllocationStarted(allocation_id="1.1", trial_id=1, agent_id="agent-1")
    await append("allocation/1.1", started, "started-1.1", "service:agent", "assigned-1.1")
    validated = ev.TrialValidationReported(
        trial_id=1,
        experiment_id=experiment_id,
        trial_run_id=1,
        steps_completed=4,
        metrics_json='{"loss": 0.9}',
    )
    await append("validation/1", validated, "validation-1", "trial:1")
    stop = ev.TrialStopRequested(trial_id=1, experiment_id=experiment_id, reason=CUT, rung=0)
    await append("trial/1", stop, "stop-1", "service:searcher", "validation-1")
    asked = ev.AllocationStopRequested(allocation_id="1.1", task_id="1", reason=CUT)
    await append("allocation/1.1", asked, "stop-1.1", "service:searcher", "stop-1")
    exited = ev.AllocationExited(allocation_id="1.1", trial_id=1, experiment_id=experiment_id, task_id="1")
    await append("allocation/1.1", exited, "exited-1.1", "service:agent", "assigned-1.1")
    ended = ev.TrialEnded(trial_id=1, experiment_id=experiment_id, state=ev.TRIAL_STATE_COMPLETED, reason=CUT)
    await append("trial/1", ended, "ended-1", "service:searcher", "exited-1.1")


def chain(answer: api_pb2.ExplainEventsResponse) -> list[tuple[int, str, str]]:
    return [(node.depth, node.event.type, node.event.reason) for node in answer.chain]


async def explain(
    stub: api_pb2_grpc.DeterminedStub, who: Metadata, kind: str, key: str
) -> api_pb2.ExplainEventsResponse:
    return await stub.ExplainEvents(api_pb2.ExplainEventsRequest(kind=kind, id=key), metadata=who)


async def test_a_cut_trial_is_explained_from_its_experiments_creation(
    stub: api_pb2_grpc.DeterminedStub, cluster: Cluster
) -> None:
    answer = await explain(stub, cluster.alice, "trial", str(cluster.trial_id))
    assert chain(answer) == [
        (0, "experiment_created", ""),
        (1, "trial_created", "ASHA: a new trial for rung 0 (4 batches)"),
        (2, "allocation_requested", "trial 1's first run"),
        (3, "allocation_assigned", "best fit"),
        (4, "allocation_started", ""),
        (4, "allocation_exited", ""),
        (5, "trial_ended", CUT),
        (0, "trial_validation_reported", ""),
        (1, "trial_stop_requested", CUT),
        (2, "allocation_stop_requested", CUT),
    ]
    root = answer.chain[0].event
    # A user's command answers nothing and starts its own chain.
    assert (root.actor, root.causation_id, root.correlation_id) == ("user:alice", "", root.event_id)
    assert answer.chain[1].event.causation_sequence == root.sequence
    assert answer.outcome == f"stopped: {CUT}"
    experiment = await explain(stub, cluster.admin, "experiment", str(cluster.experiment_id))
    assert [line[1] for line in chain(experiment)] == [line[1] for line in chain(answer)]
    assert experiment.outcome == "paused by alice: 1 of 1 trials ended"
    allocation = await explain(stub, cluster.alice, "allocation", "1.1")
    assert [line[:2] for line in chain(allocation)][:3] == [
        (0, "experiment_created"),
        (1, "trial_created"),
        (2, "allocation_requested"),
    ]
    assert (5, "trial_ended", CUT) in chain(allocation)
    assert allocation.outcome == "exited 0"


async def test_only_the_owner_or_an_admin_explains_and_bad_requests_are_refused(
    stub: api_pb2_grpc.DeterminedStub, cluster: Cluster
) -> None:
    async def refused(who: Metadata, kind: str, key: str) -> tuple[grpc.StatusCode, str]:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await explain(stub, who, kind, key)
        return raised.value.code(), str(raised.value.details())

    code, details = await refused(cluster.bob, "trial", "1")
    assert code == grpc.StatusCode.PERMISSION_DENIED and "belongs to alice" in details
    assert (await refused(cluster.bob, "allocation", "1.1"))[0] == grpc.StatusCode.PERMISSION_DENIED
    assert (await refused(cluster.alice, "trial", "99"))[0] == grpc.StatusCode.NOT_FOUND
    code, details = await refused(cluster.alice, "job", "1")
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "trial | experiment | allocation" in details
    assert (await refused(cluster.alice, "allocation", "1" * (MAX_ID_CHARS + 1)))[0] == (
        grpc.StatusCode.INVALID_ARGUMENT
    )
    assert (await explain(stub, cluster.admin, "trial", "1")).outcome == f"stopped: {CUT}"


async def test_the_http_route(gateway: Gateway, cluster: Cluster) -> None:
    assert gateway.http is not None
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{gateway.http.port}", timeout=60) as web:
        response = await web.get(
            "/api/v1/events/explain/trial/1", headers={"Authorization": cluster.alice[0][1]}
        )
        assert response.status_code == 200, response.text
        body = response.json()
        assert [(n["depth"], n["event"]["type"]) for n in body["chain"]][:2] == [
            (0, "experiment_created"),
            (1, "trial_created"),
        ]
        assert body["outcome"] == f"stopped: {CUT}"
        denied = await web.get("/api/v1/events/explain/trial/1", headers={"Authorization": cluster.bob[0][1]})
        assert denied.status_code == 403
        bad = await web.get("/api/v1/events/explain/agent/1", headers={"Authorization": cluster.alice[0][1]})
        assert bad.status_code == 400


async def test_det_events_explain_prints_the_tree_and_the_outcome(
    gateway: Gateway, cluster: Cluster, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DET_USER", "alice")
    monkeypatch.setenv("DET_PASS", PASSWORD)
    capsys.readouterr()
    assert (
        await asyncio.to_thread(main, ["-m", f"127.0.0.1:{gateway.port}", "events", "explain", "trial", "1"])
        == 0
    )
    printed = capsys.readouterr().out.splitlines()
    tree = [line for line in printed if "  service:" in line or "  user:" in line or "  trial:" in line]
    assert tree[0].split()[1:3] == ["experiment_created", "user:alice"]
    assert tree[1].startswith("  ") and tree[1].split()[1:3] == ["trial_created", "service:searcher"]
    assert tree[1].endswith("— ASHA: a new trial for rung 0 (4 batches)")
    assert tree[6].startswith(" " * 10) and "trial_ended" in tree[6]
    assert f"Outcome: stopped: {CUT}" in printed
