"""A replay's gateway (det deploy local replay): its log is loaded from a bundle once and in order,
it answers reads as the log says, refuses every change on both edges with the replay's message,
lets in the replay's user only, and appends nothing — logins and logouts included."""

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import httpx
import pytest
from pydantic import SecretStr
from support.golden_log import GOLDEN
from support.pg_server import new_database
from support.security_gateway import PASSWORD, gateway_settings, refused

from deploy.local.replay_gateway import LoadError, load
from deploy.local.servers import PostgresServer
from determined.proto import api_pb2, api_pb2_grpc
from services.common.eventstore import EventStore
from services.gateway.server import Gateway

# pause_withdrawn.jsonl up to its experiment 1 training: users admin and determined, trial 1 running.
EVENTS = 10
REFUSAL = "this cluster replays bundle.jsonl: it changes nothing"


def bundle_of(folder: Path, events: int) -> Path:
    lines = (GOLDEN / "pause_withdrawn.jsonl").read_text().splitlines(keepends=True)[:events]
    path = folder / f"bundle-{events}.jsonl"
    path.write_text("".join(lines))
    return path


@pytest.fixture(scope="module")
def module_namespace() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
async def gateway(
    nats_url: str,
    module_namespace: str,
    postgres_server: PostgresServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[Gateway]:
    store = await EventStore.connect(nats_url, module_namespace)
    try:
        assert await load(store, bundle_of(tmp_path_factory.mktemp("bundle"), EVENTS)) == (EVENTS, EVENTS)
    finally:
        await store.close()
    settings = gateway_settings(
        nats_url, module_namespace, await new_database(postgres_server, module_namespace), "replay-test"
    ).model_copy(
        update={"replay_of": "bundle.jsonl", "replay_user": "replay", "replay_password": SecretStr(PASSWORD)}
    )
    started = await Gateway.start(settings)
    assert await started.projector.catch_up(timeout_s=30.0)
    yield started
    await started.stop()


@pytest.fixture(scope="module")
async def operator(gateway: Gateway) -> tuple[tuple[str, str], ...]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{gateway.port}") as channel:
        login = await api_pb2_grpc.DeterminedStub(channel).Login(
            api_pb2.LoginRequest(username="replay", password=PASSWORD)
        )
    return (("authorization", f"Bearer {login.token}"),)


async def test_a_bundle_is_loaded_once_in_order_and_only_into_its_own_log(
    event_store: EventStore, tmp_path: Path
) -> None:
    assert await load(event_store, bundle_of(tmp_path, 4)) == (4, 4)
    assert await load(event_store, bundle_of(tmp_path, EVENTS)) == (EVENTS, EVENTS - 4)  # a load cut short
    assert await load(event_store, bundle_of(tmp_path, EVENTS)) == (EVENTS, 0)
    recorded = [json.loads(line)["event_id"] for line in bundle_of(tmp_path, EVENTS).read_text().splitlines()]
    read = [(event.sequence, event.envelope.event_id) async for event in event_store.read(follow=False)]
    assert read == list(enumerate(recorded, start=1))
    with pytest.raises(LoadError, match=f"holds {EVENTS} events, more than the 3 of"):
        await load(event_store, bundle_of(tmp_path, 3))


async def test_only_the_replay_user_logs_in(api: api_pb2_grpc.DeterminedStub) -> None:
    wrong = await refused(api.Login(api_pb2.LoginRequest(username="replay", password="wrong")))
    assert (wrong.code(), wrong.details()) == (grpc.StatusCode.UNAUTHENTICATED, "invalid credentials")
    admin = await refused(api.Login(api_pb2.LoginRequest(username="admin", password=PASSWORD)))
    assert admin.code() == grpc.StatusCode.UNAUTHENTICATED
    assert f"{REFUSAL}: its users cannot log in" in (admin.details() or "")
    login = await api.Login(api_pb2.LoginRequest(username="replay", password=PASSWORD))
    me = await api.GetMe(api_pb2.GetMeRequest(), metadata=(("authorization", f"Bearer {login.token}"),))
    assert (me.user.username, me.user.admin) == ("replay", True)


async def test_reads_answer_as_the_log_says(
    api: api_pb2_grpc.DeterminedStub, operator: tuple[tuple[str, str], ...], http: httpx.AsyncClient
) -> None:
    experiment = await api.GetExperiment(api_pb2.GetExperimentRequest(experiment_id=1), metadata=operator)
    assert (experiment.experiment.owner, experiment.experiment.state) == ("admin", "ACTIVE")
    users = await api.GetUsers(api_pb2.GetUsersRequest(), metadata=operator)
    assert [user.username for user in users.users] == ["admin", "determined"]
    page = await http.get("/api/v1/experiments/1", headers={"authorization": operator[0][1]})
    assert page.status_code == 200 and page.json()["experiment"]["id"] == 1


async def test_every_change_is_refused_on_both_edges_and_nothing_is_appended(
    api: api_pb2_grpc.DeterminedStub,
    operator: tuple[tuple[str, str], ...],
    http: httpx.AsyncClient,
    gateway: Gateway,
) -> None:
    changes = [
        api.PauseExperiment(api_pb2.PauseExperimentRequest(experiment_id=1), metadata=operator),
        api.KillExperiment(api_pb2.KillExperimentRequest(experiment_id=1), metadata=operator),
        api.KillTrial(api_pb2.KillTrialRequest(trial_id=1), metadata=operator),
        api.CreateUser(api_pb2.CreateUserRequest(username="bob", password="Bob-Pass1"), metadata=operator),
        api.UpdateUser(api_pb2.UpdateUserRequest(username="determined", active=False), metadata=operator),
        api.CreateModel(api_pb2.CreateModelRequest(name="m"), metadata=operator),
        api.LaunchTask(api_pb2.LaunchTaskRequest(task_type="COMMAND", command=["true"]), metadata=operator),
        api.UploadContext(iter([api_pb2.UploadContextRequest(chunk=b"x")]), metadata=operator),
    ]
    for change in changes:
        error = await refused(change)
        assert (error.code(), error.details()) == (grpc.StatusCode.FAILED_PRECONDITION, REFUSAL)
    answer = await http.post("/api/v1/experiments/1/kill", headers={"authorization": operator[0][1]})
    assert (answer.status_code, answer.json()["message"]) == (400, REFUSAL)
    login = await api.Login(api_pb2.LoginRequest(username="replay", password=PASSWORD))
    session = (("authorization", f"Bearer {login.token}"),)
    await api.Logout(api_pb2.LogoutRequest(), metadata=session)
    gone = await refused(api.GetMe(api_pb2.GetMeRequest(), metadata=session))
    assert gone.code() == grpc.StatusCode.UNAUTHENTICATED
    assert await gateway.store.last_sequence() == EVENTS
