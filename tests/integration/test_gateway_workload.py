"""GetWorkload and `det events simulate` through a real gateway (one for the
module, real nats-server and PostgreSQL) over a log today's cores wrote
(bench/gen_log.py's simulation): the gateway folds what the pure recorder
folds; only an admin may read it; the CLI replays it and reproduces the
recorded assignments under the settings that ran."""

import asyncio
import json
from dataclasses import replace

import grpc
import httpx
import pytest
from support import module_gateway
from support.generated_log import generated_log
from support.golden_log import stored_as_recorded
from support.security_gateway import PASSWORD

from determined.cli.__main__ import main
from determined.common.passwords import salted_hash
from determined.proto import api_pb2, api_pb2_grpc
from services.common.eventstore import EventStore
from services.common.job_queue import PublishedQueue
from services.gateway.features.events.workload import WORKLOAD_KINDS, WorkloadRecorder
from services.gateway.server import Gateway

module_namespace = module_gateway.module_namespace
gateway = module_gateway.gateway
store = module_gateway.store
stub = module_gateway.stub
web = module_gateway.web
Metadata = tuple[tuple[str, str], ...]


async def login(stub: api_pb2_grpc.DeterminedStub, username: str) -> Metadata:
    request = api_pb2.LoginRequest(username=username, password=salted_hash(PASSWORD), is_hashed=True)
    return (("authorization", f"Bearer {(await stub.Login(request)).token}"),)


@pytest.fixture(scope="module")
async def expected(store: EventStore) -> api_pb2.GetWorkloadResponse:
    """The generated log stored as it was written; what the pure recorder makes of it."""
    log = generated_log(3000, seed=4, incidents=20)
    before = await store.last_sequence()  # the gateway's own first events (its built-in users)
    await stored_as_recorded(store, [stored.envelope for stored in log])
    recorder = WorkloadRecorder()
    for stored in log:
        if stored.envelope.aggregate.partition("/")[0] in WORKLOAD_KINDS:
            recorder.fold(replace(stored, sequence=before + stored.sequence))
    return recorder.response(PublishedQueue())


async def test_an_admin_reads_the_recorded_workload(
    stub: api_pb2_grpc.DeterminedStub, expected: api_pb2.GetWorkloadResponse
) -> None:
    admin = await login(stub, "admin")
    answer = await stub.GetWorkload(api_pb2.GetWorkloadRequest(), metadata=admin)
    assert answer == expected
    assert sum(a.preempted for a in answer.allocations) == 2
    late = expected.allocations[-1].requested_at_ns
    window = await stub.GetWorkload(api_pb2.GetWorkloadRequest(since_ns=late), metadata=admin)
    assert 0 < len(window.allocations) < len(expected.allocations)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub.GetWorkload(api_pb2.GetWorkloadRequest(since_ns=2, until_ns=1), metadata=admin)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_only_an_admin_may_read_it(stub: api_pb2_grpc.DeterminedStub) -> None:
    admin = await login(stub, "admin")
    created = api_pb2.CreateUserRequest(username="carol", password=salted_hash(PASSWORD), is_hashed=True)
    await stub.CreateUser(created, metadata=admin)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub.GetWorkload(api_pb2.GetWorkloadRequest(), metadata=await login(stub, "carol"))
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "needs an admin" in str(refused.value.details())


async def test_det_events_simulate_reproduces_then_compares(
    gateway: Gateway,
    expected: api_pb2.GetWorkloadResponse,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DET_USER", "admin")
    monkeypatch.setenv("DET_PASS", PASSWORD)
    simulate = ["-m", f"127.0.0.1:{gateway.port}", "events", "simulate"]
    capsys.readouterr()
    assert await asyncio.to_thread(main, simulate) == 0
    out = capsys.readouterr().out
    assigned = sum(1 for a in expected.allocations if a.assigned_at_ns)
    assert "Recorded:  fair_share on 4 agents (16 slots)" in out
    assert f"The simulation made the {assigned} recorded assignments, in the recorded order" in out
    assert (
        await asyncio.to_thread(main, [*simulate, "--scheduler", "priority", "--agents", "2", "--json"]) == 0
    )
    lines = capsys.readouterr().out.splitlines()
    start = lines.index("{")
    said = json.loads("\n".join(lines[start : lines.index("}", start) + 1]))
    assert said["simulated"] == {"schedulers": "priority", "agents": "2 agents (8 slots)", "min_run_s": 30.0}
    assert said["reproduced"] is None
    assert said["total"]["allocations"] == len(expected.allocations)


async def test_over_http_for_admins_only(
    web: httpx.AsyncClient, stub: api_pb2_grpc.DeterminedStub, expected: api_pb2.GetWorkloadResponse
) -> None:
    admin, carol = await login(stub, "admin"), await login(stub, "carol")
    since = expected.allocations[-1].requested_at_ns
    answer = await web.get(f"/api/v1/events/workload?since={since}", headers=dict(admin))
    assert answer.status_code == 200
    assert answer.json()["allocations"][-1]["allocationId"] == expected.allocations[-1].allocation_id
    refused = await web.get("/api/v1/events/workload", headers=dict(carol))
    assert refused.status_code == 403
