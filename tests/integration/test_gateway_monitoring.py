"""GET /metrics against a real gateway, nats-server and PostgreSQL (one gateway
for the module): every family and its labels, values that move as events are
appended (a trial run's start, an agent, a consumer that falls behind), and
who may read them (loopback without a token, an admin's token; not a
non-admin's, not a stranger without one)."""

import uuid
from collections.abc import AsyncIterator

import grpc
import httpx
import nats.js.api as js_api
import pytest
from integration.test_gateway import given_trial
from prometheus_client.parser import text_string_to_metric_families
from support import module_gateway
from support.security_gateway import PASSWORD

from determined.common.passwords import salted_hash
from determined.proto import api_pb2, api_pb2_grpc, events_pb2
from services.common.envelope import Append
from services.common.eventstore import EventStore
from services.gateway.auth import Authenticator
from services.gateway.http import http_api
from services.gateway.server import Gateway

module_namespace = module_gateway.module_namespace
gateway = module_gateway.gateway
store = module_gateway.store
# Sample name and labels -> value.
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture(scope="module")
async def web(gateway: Gateway) -> AsyncIterator[httpx.AsyncClient]:
    assert gateway.http is not None
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{gateway.http.port}", timeout=60) as client:
        yield client


@pytest.fixture(scope="module")
async def tokens(gateway: Gateway) -> dict[str, str]:
    """The session tokens of the admin and of alice, who is no admin."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{gateway.port}") as channel:
        stub = api_pb2_grpc.DeterminedStub(channel)

        async def login(username: str) -> str:
            request = api_pb2.LoginRequest(username=username, password=salted_hash(PASSWORD), is_hashed=True)
            return str((await stub.Login(request)).token)

        admin = await login("admin")
        alice = api_pb2.CreateUserRequest(username="alice", password=salted_hash(PASSWORD), is_hashed=True)
        await stub.CreateUser(alice, metadata=(("authorization", f"Bearer {admin}"),))
        return {"admin": admin, "alice": await login("alice")}


async def scraped(web: httpx.AsyncClient, **headers: str) -> Samples:
    response = await web.get("/metrics", headers=headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


async def test_every_family_with_its_labels(web: httpx.AsyncClient) -> None:
    samples = await scraped(web)
    names = {name for name, _ in samples}
    for name in (
        "det_events_appended_total",
        "det_projector_applied_sequence",
        "det_events_skipped_total",
        "det_jobs",
        "det_trial_start_phase_seconds_bucket",
        "det_trial_start_phase_seconds_count",
        "process_resident_memory_bytes",
    ):
        assert name in names, name
    for source in ("event_log", "consumers", "read_models", "job_queue"):
        assert value(samples, "det_metrics_source_up", source=source) == 1, source
    for service in ("scheduler", "searcher", "checkpoint"):  # none runs here: 0 behind, not following
        assert ("det_consumer_following", frozenset({("consumer", service)})) in samples
        assert value(samples, "det_consumer_following", consumer=service) == 0
    assert ("det_consumer_lag_events", frozenset({("consumer", "projector")})) in samples
    assert ("det_jobs", frozenset({("resource_pool", "default"), ("state", "QUEUED")})) in samples
    for phase in ("requested_to_assigned", "assigned_to_started", "started_to_first_report"):
        assert ("det_trial_start_phase_seconds_count", frozenset({("phase", phase)})) in samples


async def test_values_move_after_events(web: httpx.AsyncClient, gateway: Gateway, store: EventStore) -> None:
    before = await scraped(web)
    trial_id = 41
    await given_trial(store, gateway, trial_id)  # TrialCreated, its first run requested
    agent = events_pb2.AgentRegistered(
        agent_id="m1",
        hostname="h",
        slots=[events_pb2.Slot(slot_id=0, type="cpu"), events_pb2.Slot(slot_id=1)],
    )
    placement = events_pb2.Placement(agent_id="m1", slot_ids=[0])
    report = events_pb2.MetricReport(group="training", steps_completed=1, metrics_json='{"loss": 1.0}')
    appends = [
        Append("agent/m1", agent, "m1-registered"),
        Append(
            "allocation/41.1",
            events_pb2.AllocationAssigned(allocation_id="41.1", task_id="41", placements=[placement]),
            "41.1-assigned",
        ),  # fmt: skip
        Append(
            "allocation/41.1",
            events_pb2.AllocationStarted(allocation_id="41.1", trial_id=trial_id, agent_id="m1"),
            "41.1-started",
        ),  # fmt: skip
        Append(
            "metrics/41",
            events_pb2.TrialMetricsReported(
                trial_id=trial_id, experiment_id=1, trial_run_id=1, reports=[report]
            ),
            "41.1-metrics",
        ),  # fmt: skip
    ]
    for append in appends:
        await store.append(append, actor="service:test")
    assert await gateway.projector.catch_up()
    after = await scraped(web)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("det_events_appended_total") == 6
    assert value(after, "det_projector_applied_sequence") == value(after, "det_events_appended_total")
    assert moved("det_trials", state="RUNNING") == 1
    assert moved("det_allocations", state="RUNNING") == 1
    assert moved("det_events_projected_total", type="AllocationStarted") == 1
    for phase in ("requested_to_assigned", "assigned_to_started", "started_to_first_report"):
        assert moved("det_trial_start_phase_seconds_count", phase=phase) == 1, phase
    assert value(after, "det_agents", resource_pool="default", state="ENABLED") >= 1
    assert moved("det_slots", resource_pool="default", state="used") == 1
    assert moved("det_slots", resource_pool="default", state="free") == 1


async def test_a_consumer_behind_the_log_shows_its_lag(
    web: httpx.AsyncClient, store: EventStore, module_namespace: str
) -> None:
    """A searcher's consumer (its inbox names its nats-server user) that takes
    nothing: its lag is the trial events stored, and grows with each one."""
    name = f"searcher-{uuid.uuid4().hex[:8]}"
    config = js_api.ConsumerConfig(
        durable_name=name,
        deliver_subject=f"_INBOX.searcher.{name}",
        filter_subject=f"{module_namespace}.events.trial.>",
        ack_policy=js_api.AckPolicy.NONE,
    )
    await store.js.add_consumer(store.events_stream, config)
    try:
        before = await scraped(web)
        assert value(before, "det_consumer_following", consumer="searcher") == 1
        for trial_id in (51, 52):
            created = events_pb2.TrialCreated(trial_id=trial_id, experiment_id=1, hparams_json="{}")
            await store.append(
                Append(f"trial/{trial_id}", created, f"trial-{trial_id}"), actor="service:searcher"
            )
        after = await scraped(web)
        lag = value(after, "det_consumer_lag_events", consumer="searcher")
        assert lag - value(before, "det_consumer_lag_events", consumer="searcher") == 2
    finally:
        await store.js.delete_consumer(store.events_stream, name)


async def test_who_may_read_the_metrics(
    web: httpx.AsyncClient, gateway: Gateway, tokens: dict[str, str]
) -> None:
    await scraped(web, authorization=f"Bearer {tokens['admin']}")
    alice = await web.get("/metrics", headers={"authorization": f"Bearer {tokens['alice']}"})
    assert alice.status_code == 403 and "needs an admin" in alice.json()["message"]
    forged = await web.get("/metrics", headers={"authorization": "Bearer not-a-token"})
    assert forged.status_code == 401
    # From another machine: the same routes, served to a client that is not on loopback.
    authenticator = Authenticator(gateway.settings.cluster_secret, gateway.user_directory)
    app = http_api(gateway.api, authenticator.authenticate)
    transport = httpx.ASGITransport(app=app, client=("192.0.2.7", 40000))
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as remote:
        assert (await remote.get("/metrics")).status_code == 401
        refused = await remote.get("/metrics", headers={"authorization": f"Bearer {tokens['alice']}"})
        assert refused.status_code == 403
        admitted = await remote.get("/metrics", headers={"authorization": f"Bearer {tokens['admin']}"})
        assert admitted.status_code == 200 and "det_events_appended_total" in admitted.text
