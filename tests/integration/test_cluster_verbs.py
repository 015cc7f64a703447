"""The cluster's verbs through a module-wide gateway over a real nats-server
and PostgreSQL: det slot enable|disable and det agent enable|disable --all
(SlotDisabled and SlotEnabled appended, an admin's only; what det slot list
and the REST agents show; a restart of the agent keeping them; a missing
slot or agent; the REST routes), det master logs (the gateway's own lines,
an admin's only), det master info --yaml and det version."""

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable

import grpc
import httpx
import pytest
import yaml
from support import module_gateway
from support.security_gateway import PASSWORD
from test_gateway import stored

from determined.cli.__main__ import main
from determined.common.passwords import salted_hash
from determined.proto import api_pb2, api_pb2_grpc, events_pb2
from services.common.envelope import Append
from services.common.eventstore import EventStore
from services.gateway.server import Gateway

module_namespace = module_gateway.module_namespace
gateway = module_gateway.gateway
store = module_gateway.store
stub = module_gateway.stub
web = module_gateway.web

Metadata = tuple[tuple[str, str], ...]
# A line the gateway logs (structlog's console form).
GATEWAY_LOG = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \[\w+ *\] ")


async def register(store: EventStore, gateway: Gateway, agent_id: str, run: int) -> None:
    payload = events_pb2.AgentRegistered(
        agent_id=agent_id, hostname=agent_id, slots=[events_pb2.Slot(slot_id=i, type="cpu") for i in range(3)]
    )
    await store.append(
        Append(f"agent/{agent_id}", payload, f"register-{agent_id}-{run}"), actor="service:agent"
    )
    assert await gateway.projector.catch_up()


async def token(stub: api_pb2_grpc.DeterminedStub, username: str) -> Metadata:
    login = api_pb2.LoginRequest(username=username, password=salted_hash(PASSWORD), is_hashed=True)
    return (("authorization", f"Bearer {(await stub.Login(login)).token}"),)


@pytest.fixture(scope="module")
async def admin(stub: api_pb2_grpc.DeterminedStub, store: EventStore, gateway: Gateway) -> Metadata:
    await register(store, gateway, "a1", 1)
    await register(store, gateway, "a2", 1)
    return await token(stub, "admin")


def slot_states(agent: api_pb2.Agent) -> list[str]:
    return [use.state for use in agent.slot_uses]


async def test_disabling_and_enabling_slots(
    stub: api_pb2_grpc.DeterminedStub, store: EventStore, gateway: Gateway, admin: Metadata
) -> None:
    disabled = await stub.DisableSlot(api_pb2.DisableSlotRequest(agent_id="a1", slot_id=1), metadata=admin)
    assert slot_states(disabled.agent) == ["ENABLED", "DISABLED", "ENABLED"]
    drained = await stub.DisableSlot(
        api_pb2.DisableSlotRequest(agent_id="a1", slot_id=2, drain=True), metadata=admin
    )
    # Nothing runs there: a draining slot shows DISABLED.
    assert slot_states(drained.agent) == ["ENABLED", "DISABLED", "DISABLED"]
    again = await stub.DisableSlot(api_pb2.DisableSlotRequest(agent_id="a1", slot_id=1), metadata=admin)
    assert slot_states(again.agent) == slot_states(drained.agent)
    await register(store, gateway, "a1", 2)  # a restart keeps them
    [a1] = [
        a
        for a in (await stub.GetAgents(api_pb2.GetAgentsRequest(), metadata=admin)).agents
        if a.agent_id == "a1"
    ]
    assert slot_states(a1) == ["ENABLED", "DISABLED", "DISABLED"]
    enabled = await stub.EnableSlot(api_pb2.EnableSlotRequest(agent_id="a1", slot_id=1), metadata=admin)
    assert slot_states(enabled.agent) == ["ENABLED", "ENABLED", "DISABLED"]
    kinds = [e.WhichOneof("payload") for e in await stored(store, "agent") if e.aggregate == "agent/a1"]
    assert (kinds.count("slot_disabled"), kinds.count("slot_enabled")) == (2, 1)


@pytest.mark.parametrize(
    ("agent_id", "slot_id", "code", "said"),
    [
        ("a1", 7, grpc.StatusCode.NOT_FOUND, "agent a1 has no slot 7"),
        ("ghost", 0, grpc.StatusCode.NOT_FOUND, "agent 'ghost' not found"),
    ],
)
async def test_a_missing_slot_or_agent_is_not_found(
    stub: api_pb2_grpc.DeterminedStub,
    admin: Metadata,
    agent_id: str,
    slot_id: int,
    code: grpc.StatusCode,
    said: str,
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub.EnableSlot(api_pb2.EnableSlotRequest(agent_id=agent_id, slot_id=slot_id), metadata=admin)
    assert (refused.value.code(), said in str(refused.value.details())) == (code, True)


async def test_only_an_admin_changes_slots(stub: api_pb2_grpc.DeterminedStub, admin: Metadata) -> None:
    user = await token(stub, "determined")
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub.DisableSlot(api_pb2.DisableSlotRequest(agent_id="a2", slot_id=0), metadata=user)
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED


async def test_the_rest_routes_change_slots_and_agents(web: httpx.AsyncClient, admin: Metadata) -> None:
    headers = dict(admin)
    disabled = await web.post("/api/v1/agents/a2/slots/0/disable", json={"drain": True}, headers=headers)
    assert disabled.status_code == 200, disabled.text
    assert {k: disabled.json()["slot"][k] for k in ("id", "enabled", "draining")} == {
        "id": "0",
        "enabled": False,
        "draining": False,  # nothing runs there: drained already, as det slot list shows it
    }
    enabled = await web.post("/api/v1/agents/a2/slots/0/enable", headers=headers)
    assert enabled.json()["slot"]["enabled"] is True
    agent = await web.post("/api/v1/agents/a2/disable", json={"drain": False}, headers=headers)
    assert (agent.json()["agent"]["id"], agent.json()["agent"]["enabled"]) == ("a2", False)
    agent = await web.post("/api/v1/agents/a2/enable", headers=headers)
    assert agent.json()["agent"]["enabled"] is True
    missing = await web.post("/api/v1/agents/a2/slots/9/enable", headers=headers)
    assert missing.status_code == 404


Det = Callable[..., Awaitable[list[str]]]


@pytest.fixture
def det(gateway: Gateway, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Det:
    """Our det as the admin: the lines it printed (without the in-process gateway's log lines)."""
    monkeypatch.setenv("DET_USER", "admin")
    monkeypatch.setenv("DET_PASS", PASSWORD)
    address = f"127.0.0.1:{gateway.port}"

    async def run(*argv: str) -> list[str]:
        capsys.readouterr()
        assert await asyncio.to_thread(main, ["-m", address, *argv]) == 0
        return [line for line in capsys.readouterr().out.splitlines() if not GATEWAY_LOG.match(line)]

    return run


async def test_det_agent_disable_all_and_det_slot_list(admin: Metadata, det: Det) -> None:
    assert await det("agent", "disable", "--all", "--drain") == [
        "Disabled agent a1; the work running there finishes (draining)",
        "Disabled agent a2; the work running there finishes (draining)",
    ]
    assert (await det("agent", "enable", "--all"))[-1] == "Enabled agent a2"
    assert await det("slot", "disable", "a2", "1") == [
        "Disabled slot 1 of agent a2; the work on it is stopped to resume elsewhere"
    ]
    listed = await det("slot", "list")
    assert [line.replace("|", " ").split()[:4] for line in listed if line.startswith("a2")] == [
        ["a2", "default", "0", "FREE"],
        ["a2", "default", "1", "DISABLED"],
        ["a2", "default", "2", "FREE"],
    ]
    assert await det("slot", "enable", "a2", "1") == ["Enabled slot 1 of agent a2"]


async def test_master_logs_are_the_gateway_s_own_lines(
    stub: api_pb2_grpc.DeterminedStub, admin: Metadata, det: Det
) -> None:
    # As the gateway's process logs once configure_logging sent structlog through logging (not in tests).
    logging.getLogger("services.gateway").warning("a line of the gateway")
    request = api_pb2.MasterLogsRequest(tail=50)
    entries = [e async for r in stub.MasterLogs(request, metadata=admin) for e in r.entries]
    assert 0 < len(entries) <= 50
    assert (entries[-1].level, entries[-1].message.endswith("a line of the gateway")) == ("WARNING", True)
    assert [e.id for e in entries] == sorted(e.id for e in entries)
    user = await token(stub, "determined")
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        [r async for r in stub.MasterLogs(request, metadata=user)]
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert (await det("master", "logs", "--tail", "1"))[-1].endswith("a line of the gateway")


async def test_det_version_and_master_info_yaml(gateway: Gateway, admin: Metadata, det: Det) -> None:
    from determined import __version__

    version = yaml.safe_load("\n".join(await det("version")))
    assert version["client"] == {"version": __version__}
    assert version["master"]["cluster_id"] == gateway.settings.cluster_id
    assert version["master_address"] == f"127.0.0.1:{gateway.port}"
    info = yaml.safe_load("\n".join(await det("master", "info", "--yaml")))
    assert (info["cluster_id"], info["namespace"]) == (
        gateway.settings.cluster_id,
        gateway.settings.namespace,
    )
