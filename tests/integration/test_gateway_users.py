"""Users, sessions and permissions through a real gateway (real nats-server
and PostgreSQL), as a cluster runs it: no anonymous calls."""

from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from google.protobuf import symbol_database
from test_gateway import CONFIG, stored

from deploy.local.servers import free_port
from determined.common.passwords import salted_hash
from determined.proto import api_pb2, api_pb2_grpc
from services.common.eventstore import EventStore
from services.gateway.features.users.directory import InitialPasswordError
from services.gateway.server import Gateway
from services.gateway.settings import GatewaySettings

SECRET = "users-test-secret"
PASSWORD = "first-password"
Metadata = tuple[tuple[str, str], ...]
# The RPCs a call without a token may make.
PUBLIC = {"Login", "GetMaster"}


def settings(nats_url: str, namespace: str, database_url: str, **changes: Any) -> GatewaySettings:
    given: dict[str, Any] = {"initial_user_password": PASSWORD, **changes}
    return GatewaySettings(
        nats_url=nats_url,
        namespace=namespace,
        database_url=database_url,
        gateway_port=free_port(),
        gateway_host="127.0.0.1",
        cluster_secret=SECRET,
        grace_period_s=0.1,
        **given,
    )


@pytest.fixture
async def gateway(nats_url: str, namespace: str, database_url: str) -> AsyncIterator[Gateway]:
    started = await Gateway.start(settings(nats_url, namespace, database_url))
    yield started
    await started.stop()


async def login(api: api_pb2_grpc.DeterminedStub, username: str, password: str = PASSWORD) -> Metadata:
    response = await api.Login(
        api_pb2.LoginRequest(username=username, password=salted_hash(password), is_hashed=True)
    )
    return (("authorization", f"Bearer {response.token}"),)


async def refused(call: Any, code: grpc.StatusCode) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await call
    assert raised.value.code() == code, raised.value.details()
    return str(raised.value.details())


async def create_user(
    api: api_pb2_grpc.DeterminedStub, admin: Metadata, username: str, password: str
) -> None:
    request = api_pb2.CreateUserRequest(username=username, password=salted_hash(password), is_hashed=True)
    await api.CreateUser(request, metadata=admin)


async def _requests(request: Any) -> AsyncIterator[Any]:
    yield request


async def _call(api: api_pb2_grpc.DeterminedStub, method: Any, metadata: Metadata) -> None:
    """Calls one RPC with an empty request, whatever its shape."""
    request = symbol_database.Default().GetSymbol(method.input_type.full_name)()
    rpc = getattr(api, method.name)
    if method.client_streaming:
        await rpc(_requests(request), metadata=metadata)
    elif method.server_streaming:
        async for _ in rpc(request, metadata=metadata):
            pass
    else:
        await rpc(request, metadata=metadata)


async def test_every_rpc_but_login_and_get_master_needs_a_good_token(
    api: api_pb2_grpc.DeterminedStub,
) -> None:
    methods = api_pb2.DESCRIPTOR.services_by_name["Determined"].methods
    forged = (("authorization", "Bearer session:1:x:99999999999999999999:0"),)
    for metadata in ((), forged, (("authorization", "Basic YWRtaW46"),)):
        for method in methods:
            if method.name in PUBLIC:
                continue
            details = await refused(_call(api, method, metadata), grpc.StatusCode.UNAUTHENTICATED)
            assert "det user login" in details, (method.name, details)
    assert (await api.GetMaster(api_pb2.GetMasterRequest())).version


async def test_login_whoami_logout(api: api_pb2_grpc.DeterminedStub) -> None:
    plain = await api.Login(api_pb2.LoginRequest(username="determined", password=PASSWORD))  # is_hashed=false
    assert plain.user.username == "determined" and not plain.user.admin and plain.expires_at_ns > 0
    token = await login(api, "determined")
    assert (await api.GetMe(api_pb2.GetMeRequest(), metadata=token)).user.username == "determined"
    await api.Logout(api_pb2.LogoutRequest(), metadata=token)
    assert "ended" in await refused(
        api.GetMe(api_pb2.GetMeRequest(), metadata=token), grpc.StatusCode.UNAUTHENTICATED
    )
    other = (("authorization", f"Bearer {plain.token}"),)
    assert (await api.GetMe(api_pb2.GetMeRequest(), metadata=other)).user.id == 2  # another session goes on
    for username, password in (("determined", "wrong"), ("nobody", PASSWORD), ("admin", "")):
        details = await refused(login(api, username, password), grpc.StatusCode.UNAUTHENTICATED)
        assert details == "invalid credentials"


async def test_users_are_created_listed_and_edited_by_admins(
    api: api_pb2_grpc.DeterminedStub, event_store: EventStore
) -> None:
    admin = await login(api, "admin")
    await create_user(api, admin, "ann", "ann-pw")
    assert "already" in await refused(create_user(api, admin, "ann", ""), grpc.StatusCode.ALREADY_EXISTS)
    ann = await login(api, "ann", "ann-pw")
    details = await refused(create_user(api, ann, "bob", ""), grpc.StatusCode.PERMISSION_DENIED)
    assert "creating a user needs an admin" in details
    listed = await api.GetUsers(api_pb2.GetUsersRequest(), metadata=ann)
    assert [(u.id, u.username, u.admin) for u in listed.users] == [
        (1, "admin", True),
        (2, "determined", False),
        (3, "ann", False),
    ]
    own = api_pb2.UpdateUserRequest(username="ann", display_name="Ann A.")
    assert (await api.UpdateUser(own, metadata=ann)).user.display_name == "Ann A."
    promote = api_pb2.UpdateUserRequest(username="ann", admin=True)
    assert "needs an admin" in await refused(
        api.UpdateUser(promote, metadata=ann), grpc.StatusCode.PERMISSION_DENIED
    )
    deactivate = api_pb2.UpdateUserRequest(username="ann", active=False)
    assert not (await api.UpdateUser(deactivate, metadata=admin)).user.active
    again = await api.UpdateUser(deactivate, metadata=admin)
    assert "nothing to do" in again.unchanged_reason
    assert "not active" in await refused(
        api.GetMe(api_pb2.GetMeRequest(), metadata=ann), grpc.StatusCode.UNAUTHENTICATED
    )
    assert "not active" in await refused(login(api, "ann", "ann-pw"), grpc.StatusCode.UNAUTHENTICATED)
    active = await api.GetUsers(api_pb2.GetUsersRequest(), metadata=admin)
    assert "ann" not in [u.username for u in active.users]
    everyone = await api.GetUsers(api_pb2.GetUsersRequest(include_inactive=True), metadata=admin)
    assert "ann" in [u.username for u in everyone.users]
    created = [e.user_created for e in await stored(event_store, "user") if e.HasField("user_created")]
    assert [(c.username, c.created_by) for c in created] == [
        ("admin", "cluster"),
        ("determined", "cluster"),
        ("ann", "user:admin"),
    ]
    assert created[2].password_hash.startswith("$2") and salted_hash("ann-pw") not in created[2].password_hash


async def test_a_new_password_ends_every_earlier_session(
    api: api_pb2_grpc.DeterminedStub, event_store: EventStore, capfd: pytest.CaptureFixture[str]
) -> None:
    admin = await login(api, "admin")
    await create_user(api, admin, "ann", "ann-first-pw")
    ann = await login(api, "ann", "ann-first-pw")
    other = await login(api, "determined")
    foreign = api_pb2.SetUserPasswordRequest(username="determined", password=salted_hash("x"), is_hashed=True)
    await refused(api.SetUserPassword(foreign, metadata=ann), grpc.StatusCode.PERMISSION_DENIED)
    own = api_pb2.SetUserPasswordRequest(password=salted_hash("ann-second-pw"), is_hashed=True)
    await api.SetUserPassword(own, metadata=ann)
    details = await refused(api.GetMe(api_pb2.GetMeRequest(), metadata=ann), grpc.StatusCode.UNAUTHENTICATED)
    assert "password was changed" in details
    await refused(login(api, "ann", "ann-first-pw"), grpc.StatusCode.UNAUTHENTICATED)
    ann = await login(api, "ann", "ann-second-pw")
    assert (await api.GetMe(api_pb2.GetMeRequest(), metadata=ann)).user.username == "ann"
    await api.SetUserPassword(
        api_pb2.SetUserPasswordRequest(username="ann", password="ann-third-pw"), metadata=admin
    )
    await login(api, "ann", "ann-third-pw")
    assert (await api.GetMe(api_pb2.GetMeRequest(), metadata=other)).user.username == "determined"
    hashes = [
        e.user_password_changed.password_hash
        for e in await stored(event_store, "user")
        if e.HasField("user_password_changed")
    ]
    logged = "".join(capfd.readouterr())
    assert len(hashes) == 2 and "logged_in" in logged
    passwords = ("ann-first-pw", "ann-second-pw", "ann-third-pw")
    for secret in (*hashes, *passwords, *map(salted_hash, passwords)):
        assert secret not in logged


async def test_only_an_owner_or_an_admin_deletes_an_experiment_and_only_admins_manage_agents(
    api: api_pb2_grpc.DeterminedStub, event_store: EventStore, gateway: Gateway
) -> None:
    admin = await login(api, "admin")
    await create_user(api, admin, "ann", "pw")
    ann = await login(api, "ann", "pw")
    determined = await login(api, "determined")
    created = await api.CreateExperiment(api_pb2.CreateExperimentRequest(config_yaml=CONFIG), metadata=ann)
    experiment = (
        await api.GetExperiment(
            api_pb2.GetExperimentRequest(experiment_id=created.experiment_id), metadata=determined
        )
    ).experiment
    assert experiment.owner == "ann"
    await api.KillExperiment(api_pb2.KillExperimentRequest(experiment_id=experiment.id), metadata=determined)
    delete = api_pb2.DeleteExperimentRequest(experiment_id=experiment.id)
    details = await refused(
        api.DeleteExperiment(delete, metadata=determined), grpc.StatusCode.PERMISSION_DENIED
    )
    assert "belongs to ann" in details
    disable = api_pb2.DisableAgentRequest(agent_id="a1")
    details = await refused(api.DisableAgent(disable, metadata=ann), grpc.StatusCode.PERMISSION_DENIED)
    assert "agent needs an admin" in details
    await refused(
        api.DisableAgent(disable, metadata=admin), grpc.StatusCode.NOT_FOUND
    )  # allowed: no such agent


async def test_a_login_through_one_gateway_works_at_once_on_another(
    gateway: Gateway, api: api_pb2_grpc.DeterminedStub, nats_url: str, namespace: str, database_url: str
) -> None:
    second = await Gateway.start(settings(nats_url, namespace, database_url))
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{second.port}") as channel:
            other = api_pb2_grpc.DeterminedStub(channel)
            for _ in range(5):
                token = await login(api, "admin")
                assert (await other.GetMe(api_pb2.GetMeRequest(), metadata=token)).user.username == "admin"
                await other.Logout(api_pb2.LogoutRequest(), metadata=token)
                assert await gateway.user_directory.catch_up()
                await refused(
                    api.GetMe(api_pb2.GetMeRequest(), metadata=token), grpc.StatusCode.UNAUTHENTICATED
                )
    finally:
        await second.stop()
    assert len(gateway.user_directory.current.users) == 2  # the second gateway created no built-in user again


async def test_a_new_cluster_needs_an_initial_password(
    nats_url: str, namespace: str, database_url: str
) -> None:
    blank = settings(nats_url, namespace, database_url, initial_user_password="")
    with pytest.raises(InitialPasswordError, match="DET_INITIAL_USER_PASSWORD"):
        await Gateway.start(blank)
    started = await Gateway.start(blank.model_copy(update={"allow_blank_password": True}))
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{started.port}") as channel:
            api = api_pb2_grpc.DeterminedStub(channel)
            assert (await api.Login(api_pb2.LoginRequest(username="admin"))).user.admin
            await refused(
                api.Login(api_pb2.LoginRequest(username="admin", password="x")),
                grpc.StatusCode.UNAUTHENTICATED,
            )
    finally:
        await started.stop()


async def test_users_and_sessions_reach_the_read_models(
    api: api_pb2_grpc.DeterminedStub, gateway: Gateway
) -> None:
    admin = await login(api, "admin")
    await api.Logout(api_pb2.LogoutRequest(), metadata=admin)
    assert await gateway.projector.catch_up()
    rows = await gateway.pool.fetch("SELECT * FROM read_model.user_sessions")
    assert len(rows) == 1 and rows[0]["user_id"] == 1 and rows[0]["ended_at_ns"] is not None
    columns = [
        row["column_name"]
        for row in await gateway.pool.fetch(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = 'read_model' AND table_name = 'users'"
        )
    ]
    assert columns and not [name for name in columns if "hash" in name or name == "password"]


async def test_revocation_is_stored_as_an_event(
    api: api_pb2_grpc.DeterminedStub, event_store: EventStore
) -> None:
    token = await login(api, "determined")
    await api.Logout(api_pb2.LogoutRequest(), metadata=token)
    kinds = [e.WhichOneof("payload") for e in await stored(event_store, "user")]
    assert kinds[-2:] == ["user_session_started", "user_session_revoked"]
    revoked = (await stored(event_store, "user"))[-1]
    assert revoked.event_id.startswith("session-revoked-") and revoked.actor == "user:determined"
    assert revoked.user_session_revoked.user_id == 2
