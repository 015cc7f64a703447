"""det events through a real gateway (one for the module, real nats-server and
PostgreSQL): the audit trail (each of alice's commands carries her as actor),
what a user who is not an admin may read, the filters, and that no secret
(password hash, token, storage credential) is ever returned."""

import asyncio
import json
import time
from dataclasses import dataclass

import grpc
import httpx
import pytest
from google.protobuf import json_format
from support import module_gateway
from support.security_gateway import PASSWORD

from determined.cli.__main__ import main
from determined.common.passwords import salted_hash
from determined.proto import api_pb2, api_pb2_grpc, events_pb2
from services.common.envelope import Append
from services.common.eventstore import EventStore
from services.gateway.server import Gateway

Metadata = tuple[tuple[str, str], ...]
SECRET_KEY = "s3-secret-never-shown"
CONFIG = f"""
entrypoint: python3 train.py
searcher: {{name: single, metric: loss, max_length: 10}}
checkpoint_storage: {{type: s3, bucket: b, access_key: AKIA-never-shown, secret_key: {SECRET_KEY}}}
"""
# What alice's commands append (the audit trail).
ALICES_TYPES = {
    "user_session_started",
    "experiment_created",
    "experiment_state_changed",
    "checkpoint_gc_policy_changed",
    "job_resources_changed",
    "experiment_kill_requested",
    "model_created",
    "allocation_requested",
    "allocation_kill_requested",
    "user_password_changed",
}
CHECKPOINT = "0b7c8a9e-1111-4222-8333-944445555666"

module_namespace = module_gateway.module_namespace
gateway = module_gateway.gateway
store = module_gateway.store
stub = module_gateway.stub
web = module_gateway.web


@dataclass(frozen=True)
class History:
    admin: Metadata
    alice: Metadata
    bob: Metadata
    tokens: tuple[str, ...]
    alices_experiment: int
    admins_experiment: int
    trial_id: int


async def login(stub: api_pb2_grpc.DeterminedStub, username: str, password: str = PASSWORD) -> str:
    request = api_pb2.LoginRequest(username=username, password=salted_hash(password), is_hashed=True)
    return str((await stub.Login(request)).token)


def bearer(token: str) -> Metadata:
    return (("authorization", f"Bearer {token}"),)


@pytest.fixture(scope="module")
async def history(stub: api_pb2_grpc.DeterminedStub, store: EventStore, gateway: Gateway) -> History:
    """The admin makes alice and bob and an experiment; alice does one of each
    command; a trial of alice's experiment runs (as the services would append it)."""
    admin_token = await login(stub, "admin")
    admin = bearer(admin_token)
    for name in ("alice", "bob"):
        request = api_pb2.CreateUserRequest(username=name, password=salted_hash(PASSWORD), is_hashed=True)
        await stub.CreateUser(request, metadata=admin)
    alice_token, bob_token = await login(stub, "alice"), await login(stub, "bob")
    alice = bearer(alice_token)
    created = api_pb2.CreateExperimentRequest(config_yaml=CONFIG, activate=False)
    admins = (await stub.CreateExperiment(created, metadata=admin)).experiment_id
    experiment = (await stub.CreateExperiment(created, metadata=alice)).experiment_id
    await stub.ActivateExperiment(api_pb2.ActivateExperimentRequest(experiment_id=experiment), metadata=alice)
    await stub.PauseExperiment(api_pb2.PauseExperimentRequest(experiment_id=experiment), metadata=alice)
    policy = api_pb2.SetGcPolicyRequest(experiment_id=experiment, save_trial_latest=2)
    await stub.SetGcPolicy(policy, metadata=alice)
    await stub.UpdateJob(api_pb2.UpdateJobRequest(job_id=str(experiment), priority=7), metadata=alice)
    await stub.CreateModel(api_pb2.CreateModelRequest(name="alices-model"), metadata=alice)
    task = await stub.LaunchTask(
        api_pb2.LaunchTaskRequest(task_type="COMMAND", command=["sleep", "1"]), metadata=alice
    )
    await stub.KillTask(api_pb2.KillTaskRequest(task_id=task.task.id), metadata=alice)
    password = api_pb2.SetUserPasswordRequest(
        username="alice", password=salted_hash(PASSWORD), is_hashed=True
    )
    await stub.SetUserPassword(password, metadata=alice)
    alice_token = await login(stub, "alice")  # the change ended her sessions
    alice = bearer(alice_token)
    await stub.KillExperiment(api_pb2.KillExperimentRequest(experiment_id=experiment), metadata=alice)
    registered = events_pb2.AgentRegistered(agent_id="a1", slots=[events_pb2.Slot(slot_id=0, type="cpu")])
    await store.append(Append("agent/a1", registered, "register-a1"), actor="agent:a1")
    assert await gateway.projector.catch_up()
    await stub.DisableAgent(api_pb2.DisableAgentRequest(agent_id="a1"), metadata=admin)
    trial_id = await _a_trial_runs(store, gateway, experiment)
    return History(
        admin, alice, bearer(bob_token), (admin_token, alice_token, bob_token), experiment, admins, trial_id
    )


async def _a_trial_runs(store: EventStore, gateway: Gateway, experiment_id: int) -> int:
    """Trial 1 of the experiment, its run, a metric batch and a checkpoint; and
    trial 11 (whose subjects share trial 1's prefix), which is not read with it."""
    for trial_id in (1, 11):
        created = events_pb2.TrialCreated(
            trial_id=trial_id, experiment_id=experiment_id, reason="random draw"
        )
        await store.append(
            Append(f"trial/{trial_id}", created, f"trial-{trial_id}"), actor="service:searcher"
        )
    requested = events_pb2.AllocationRequested(
        allocation_id="1.1", task_id="1", task_type="TRIAL", slots=1, job_id=f"experiment/{experiment_id}",
        trial=events_pb2.TrialLaunch(experiment_id=experiment_id, trial_id=1, trial_run_id=1),
        reason="trial 1's first run",
    )  # fmt: skip
    await store.append(
        Append("allocation/1.1", requested, "request-1.1", causation_id="trial-1"), actor="service:searcher"
    )
    report = events_pb2.MetricReport(group="training", steps_completed=5, metrics_json='{"loss": 1.0}')
    metrics = events_pb2.TrialMetricsReported(
        trial_id=1, experiment_id=experiment_id, trial_run_id=1, reports=[report]
    )
    await store.append(Append("metrics/1", metrics, "metrics-1"), actor="trial:1")
    checkpoint = events_pb2.CheckpointReported(
        uuid=CHECKPOINT, trial_id=1, experiment_id=experiment_id, allocation_id="1.1", steps_completed=5
    )
    await store.append(Append(f"checkpoint/{CHECKPOINT}", checkpoint, "checkpoint-1"), actor="trial:1")
    assert await gateway.projector.catch_up()
    return 1


async def events(
    stub: api_pb2_grpc.DeterminedStub, who: Metadata, limit: int = 0, tail: bool = False, **fields: object
) -> list[api_pb2.LoggedEvent]:
    request = api_pb2.GetEventsRequest(filter=api_pb2.EventFilter(**fields), limit=limit, tail=tail)  # type: ignore[arg-type]
    return [event async for response in stub.GetEvents(request, metadata=who) for event in response.events]


async def refused(
    stub: api_pb2_grpc.DeterminedStub, who: Metadata, **fields: object
) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await events(stub, who, **fields)
    return raised.value.code(), str(raised.value.details())


async def test_user_lists_what_alice_did_and_nothing_of_the_admins(
    stub: api_pb2_grpc.DeterminedStub, history: History
) -> None:
    for who in (history.admin, history.alice):
        alices = await events(stub, who, user="alice")
        assert {event.actor for event in alices} == {"user:alice"}
        assert {event.type for event in alices} == ALICES_TYPES
    created = [e for e in await events(stub, history.admin, user="admin") if e.type == "experiment_created"]
    assert [e.aggregate for e in created] == [f"experiment/{history.admins_experiment}"]


async def test_a_user_reads_only_what_they_own_and_did(
    stub: api_pb2_grpc.DeterminedStub, history: History
) -> None:
    alices = await events(stub, history.alice)
    others = {e.aggregate for e in alices if e.actor != "user:alice"}  # the services', the admin's
    # user/3: her creation, by the admin; trial 11 is of her experiment too.
    assert others == {
        "trial/1",
        "trial/11",
        "metrics/1",
        "allocation/1.1",
        f"checkpoint/{CHECKPOINT}",
        "user/3",
    }
    assert f"experiment/{history.alices_experiment}" in {e.aggregate for e in alices}
    assert {e.type for e in await events(stub, history.bob)} == {"user_created", "user_session_started"}


async def test_another_users_events_are_refused(stub: api_pb2_grpc.DeterminedStub, history: History) -> None:
    for fields in (
        {"experiment_id": history.alices_experiment},
        {"trial_id": history.trial_id},
        {"allocation_id": "1.1"},
    ):
        code, details = await refused(stub, history.bob, **fields)
        assert code == grpc.StatusCode.PERMISSION_DENIED and "belongs to alice" in details
    code, _ = await refused(stub, history.alice, experiment_id=history.admins_experiment)
    assert code == grpc.StatusCode.PERMISSION_DENIED
    code, _ = await refused(stub, history.admin, experiment_id=99)
    assert code == grpc.StatusCode.NOT_FOUND


async def test_a_trials_events_are_exactly_its_aggregates(
    stub: api_pb2_grpc.DeterminedStub, history: History
) -> None:
    found = await events(stub, history.alice, trial_id=history.trial_id)
    assert [(e.aggregate, e.type) for e in found] == [
        ("trial/1", "trial_created"),
        ("allocation/1.1", "allocation_requested"),
        ("metrics/1", "trial_metrics_reported"),
        (f"checkpoint/{CHECKPOINT}", "checkpoint_reported"),
    ]
    created, requested = found[0], found[1]
    assert (created.reason, requested.reason) == ("random draw", "trial 1's first run")
    assert requested.causation_id == "trial-1" and requested.causation_sequence == created.sequence
    experiments = await events(stub, history.admin, experiment_id=history.alices_experiment)
    assert {e.aggregate for e in found} < {e.aggregate for e in experiments}
    assert "trial/11" in {e.aggregate for e in experiments}
    both = await events(stub, history.admin, experiment_id=history.alices_experiment, trial_id=1)
    assert [e.sequence for e in both] == [e.sequence for e in found]


async def test_nothing_returned_holds_a_secret(
    stub: api_pb2_grpc.DeterminedStub, web: httpx.AsyncClient, history: History
) -> None:
    everything = await events(stub, history.admin)
    assert {"user_created", "user_password_changed", "experiment_created"} <= {e.type for e in everything}
    page = await web.get("/api/v1/events", headers=_http(history.admin))
    texts = [b"".join(e.SerializeToString() for e in everything).decode(errors="replace"), page.text]
    for text in texts:
        assert "$2b$" not in text and SECRET_KEY not in text and "AKIA" not in text
        assert not any(token in text for token in history.tokens)
        assert "(redacted)" in text


async def test_types_since_limit_and_tail(stub: api_pb2_grpc.DeterminedStub, history: History) -> None:
    states = await events(stub, history.admin, types=["ExperimentStateChanged", "experiment_kill_requested"])
    assert [e.type for e in states] == [
        "experiment_state_changed",
        "experiment_state_changed",
        "experiment_kill_requested",
    ]
    code, details = await refused(stub, history.admin, types=["TrialStoped"])
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "TrialStoped" in details
    everything = await events(stub, history.admin)
    assert [e.sequence for e in await events(stub, history.admin, limit=3)] == [
        e.sequence for e in everything[:3]
    ]
    assert [e.sequence for e in await events(stub, history.admin, limit=3, tail=True)] == [
        e.sequence for e in everything[-3:]
    ]
    middle = everything[len(everything) // 2]
    later = await events(stub, history.admin, since_ns=middle.occurred_at_ns)
    assert later and all(e.occurred_at_ns >= middle.occurred_at_ns for e in later)
    assert [e.sequence for e in later] == [
        e.sequence for e in everything if e.occurred_at_ns >= middle.occurred_at_ns
    ]
    until = await events(stub, history.admin, until_ns=middle.occurred_at_ns, from_sequence=2)
    assert [e.sequence for e in until] == [
        e.sequence for e in everything[1:] if e.occurred_at_ns <= middle.occurred_at_ns
    ]


async def test_failed_logins_of_a_user_are_recorded(
    stub: api_pb2_grpc.DeterminedStub, store: EventStore, history: History
) -> None:
    for username in ("bob", "bob", "nobody"):
        with pytest.raises(grpc.aio.AioRpcError):
            await login(stub, username, "wrong-password")
    failed = await events(stub, history.admin, types=["UserLoginFailed"])
    # At most one per user, address and minute: two when the minute turned between the two.
    assert 1 <= len(failed) <= 2
    assert {(e.aggregate, e.reason) for e in failed} == {("user/4", "wrong password")}
    assert all(e.actor.startswith("address:") for e in failed)
    assert [e.sequence for e in await events(stub, history.bob, types=["UserLoginFailed"])] == [
        e.sequence for e in failed
    ]


async def test_following_a_trial_gets_its_new_events(
    stub: api_pb2_grpc.DeterminedStub, store: EventStore, history: History
) -> None:
    request = api_pb2.GetEventsRequest(
        filter=api_pb2.EventFilter(trial_id=history.trial_id), follow=True, tail=True, limit=1
    )
    call = stub.GetEvents(request, metadata=history.alice)
    first = await asyncio.wait_for(call.read(), 60)
    assert [e.aggregate for e in first.events] == [f"checkpoint/{CHECKPOINT}"]
    ended = events_pb2.TrialEnded(
        trial_id=1, experiment_id=history.alices_experiment, state=events_pb2.TRIAL_STATE_COMPLETED
    )
    await store.append(Append("trial/1", ended, "trial-ended-1"), actor="service:searcher")
    other = events_pb2.TrialEnded(trial_id=11, experiment_id=history.alices_experiment, state=ended.state)
    await store.append(Append("trial/11", other, "trial-ended-11"), actor="service:searcher")
    second = await asyncio.wait_for(call.read(), 60)
    assert [(e.aggregate, e.summary) for e in second.events] == [("trial/1", "trial 1 ended COMPLETED")]
    call.cancel()


async def test_the_http_route(web: httpx.AsyncClient, history: History) -> None:
    response = await web.get(
        "/api/v1/events", params={"trialId": history.trial_id, "type": "TrialCreated,checkpoint_reported"},
        headers=_http(history.alice),
    )  # fmt: skip
    assert response.status_code == 200, response.text
    found = response.json()["events"]
    assert [(e["aggregate"], e["type"]) for e in found] == [
        ("trial/1", "trial_created"),
        (f"checkpoint/{CHECKPOINT}", "checkpoint_reported"),
    ]
    assert json_format.ParseDict(found[0], api_pb2.LoggedEvent()).reason == "random draw"
    assert json.loads(found[0]["payloadJson"])["reason"] == "random draw"
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() + 3600))
    later = await web.get("/api/v1/events", params={"since": since}, headers=_http(history.admin))
    assert later.json() == {"events": []}
    denied = await web.get(
        "/api/v1/events", params={"experimentId": history.alices_experiment}, headers=_http(history.bob)
    )
    assert denied.status_code == 403
    bad = await web.get("/api/v1/events", params={"since": "yesterday"}, headers=_http(history.admin))
    assert bad.status_code == 400


def _http(who: Metadata) -> dict[str, str]:
    return {"Authorization": who[0][1]}


async def test_det_events_prints_one_line_per_event(
    gateway: Gateway, history: History, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DET_USER", "alice")
    monkeypatch.setenv("DET_PASS", PASSWORD)
    det = ["-m", f"127.0.0.1:{gateway.port}", "events"]
    trial = [*det, "--trial", "1", "--type", "TrialCreated"]
    capsys.readouterr()
    assert await asyncio.to_thread(main, [*trial, "--type", "allocation_requested"]) == 0
    created, requested = printed_events(capsys)
    sequence = created.split()[1]
    assert created.split()[2:5] == ["trial/1", "trial_created", "service:searcher"]
    assert created.endswith("trial 1 of experiment 2 created: random draw")
    assert requested.endswith(f"trial 1's first run  <- {sequence}")
    assert await asyncio.to_thread(main, [*trial, "--json"]) == 0
    [line] = [line for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert json.loads(line)["reason"] == "random draw"
    assert await asyncio.to_thread(main, [*det, "--experiment", str(history.admins_experiment)]) == 1
    assert "belongs to admin" in capsys.readouterr().err


def printed_events(capsys: pytest.CaptureFixture[str]) -> list[str]:
    """The event lines printed (the in-process gateway logs to stdout too)."""
    return [line for line in capsys.readouterr().out.splitlines() if "  #" in line]
