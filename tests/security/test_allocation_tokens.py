"""Finding 3 of issue 17: a trial's allocation token is good only for the
calls a trial process makes (auth.TRIAL_RPCS), for its own trial, while its
allocation is open. Walks every RPC of the service (from the proto
descriptor: a new RPC is walked too) and every HTTP route (from the app's
routes) with the token of (a) its own open trial, (b) another trial, (c) its
own trial after its allocation closed, against a real gateway, nats-server
and PostgreSQL."""

import re
from collections.abc import Mapping

import grpc
import httpx
from google.protobuf.descriptor import MethodDescriptor
from google.protobuf.message import Message
from integration.test_gateway import CONFIG, given_trial
from starlette.routing import Mount, Route, WebSocketRoute
from support import security_gateway
from support.security_gateway import SECRET, Metadata, logged_in, refused

from determined.proto import api_pb2, api_pb2_grpc, events_pb2
from services.common.envelope import Append
from services.common.eventstore import EventStore
from services.common.tokens import mint_allocation_token
from services.gateway.auth import TRIAL_RPCS
from services.gateway.http import http_api
from services.gateway.server import Gateway

# The module's fixtures: a real gateway and clients of it (tests/support/security_gateway.py).
gateway = security_gateway.gateway

SERVICE = api_pb2.DESCRIPTOR.services_by_name["Determined"]
CHECKPOINT = "c-1"
# A good request of each trial call, for trial 1 (allocation 1.1).
TRIAL_REQUESTS: Mapping[str, Message] = {
    "ReportMetrics": api_pb2.ReportMetricsRequest(
        trial_id=1,
        trial_run_id=1,
        batch_seq=1,
        reporter_id="p",
        reports=[events_pb2.MetricReport(group="training", steps_completed=10, metrics_json='{"loss": 1.0}')],
    ),
    "ReportProgress": api_pb2.ReportProgressRequest(trial_id=1, progress=0.5, reporter_id="p", seq=1),
    "ReportCheckpoint": api_pb2.ReportCheckpointRequest(
        uuid="c-2", trial_id=1, allocation_id="1.1", steps_completed=10, resources={"model.pt": 3}
    ),
    "ReportStatus": api_pb2.ReportStatusRequest(trial_id=1, status="training", reporter_id="p", seq=1),
    "ReportEarlyExit": api_pb2.ReportEarlyExitRequest(trial_id=1, reason="USER_REQUESTED_STOP"),
    "SetTrialMetadata": api_pb2.SetTrialMetadataRequest(trial_id=1, metadata_json='{"epoch": 1}'),
    "GetTrialMetadata": api_pb2.GetTrialMetadataRequest(trial_id=1),
    "GetBestValidation": api_pb2.GetBestValidationRequest(trial_id=1),
    "WatchAllocation": api_pb2.WatchAllocationRequest(allocation_id="1.1", timeout_s=0),
    "AcknowledgeStop": api_pb2.AcknowledgeStopRequest(allocation_id="1.1"),
    "DeleteCheckpoints": api_pb2.DeleteCheckpointsRequest(uuids=[CHECKPOINT]),
    "ReportCheckpointUse": api_pb2.ReportCheckpointUseRequest(trial_id=1, checkpoint_uuid=CHECKPOINT),
}
# Path parameters of the routes: trial 1 of experiment 1 and its checkpoint; a task; an explanation.
PATH_VALUES = {
    "experiment_id": "1",
    "trial_id": "1",
    "uuid": CHECKPOINT,
    "path": "model.pt",
    "task_id": "6f1c2d3e-4a5b-4c6d-8e7f-a1b2c3d4e5f6",
    # det events explain trial 1
    "kind": "trial",
    "id": "1",
    # det agent|slot enable|disable
    "agent_id": "agent-1",
    "slot_id": "0",
    # det experiment label add|remove
    "label": "x",
}


def token(trial_id: int, allocation_id: str) -> Metadata:
    return (("x-allocation-token", mint_allocation_token(SECRET, trial_id, allocation_id)),)


async def trials(api: api_pb2_grpc.DeterminedStub, gateway: Gateway, store: EventStore) -> None:
    """The admin's experiment 1 with trials 1 (allocation 1.1, asked to stop)
    and 2 (allocation 2.1), both open; trial 1 has checkpoint c-1."""
    admin = await logged_in(api)
    await api.CreateExperiment(
        api_pb2.CreateExperimentRequest(config_yaml=CONFIG, context_tgz=b"tgz", activate=True), metadata=admin
    )
    await given_trial(store, gateway, trial_id=1)
    await given_trial(store, gateway, trial_id=2)
    stop = events_pb2.AllocationStopRequested(allocation_id="1.1", task_id="1", reason="experiment paused")
    await store.append(Append("allocation/1.1", stop, "stop-1.1"), actor="service:searcher")
    request = api_pb2.ReportCheckpointRequest(
        uuid=CHECKPOINT, trial_id=1, allocation_id="1.1", steps_completed=5, resources={"model.pt": 3}
    )
    await api.ReportCheckpoint(request, metadata=token(1, "1.1"))
    assert await gateway.projector.catch_up()


async def call(api: api_pb2_grpc.DeterminedStub, method: MethodDescriptor, metadata: Metadata) -> None:
    """Calls `method` with its trial request (or an empty one), to the end of its answer."""
    request = TRIAL_REQUESTS.get(method.name) or getattr(api_pb2, method.input_type.name)()
    stub = getattr(api, method.name)
    if method.client_streaming:
        await stub(iter([request]), metadata=metadata)
    elif method.server_streaming:
        async for _ in stub(request, metadata=metadata):
            pass
    else:
        await stub(request, metadata=metadata)


async def walk(
    api: api_pb2_grpc.DeterminedStub, metadata: Metadata
) -> dict[str, grpc.aio.AioRpcError | None]:
    """Every RPC of the service called with `metadata`: its error, None when it succeeded."""
    answers: dict[str, grpc.aio.AioRpcError | None] = {}
    for method in SERVICE.methods:
        try:
            await call(api, method, metadata)
            answers[method.name] = None
        except grpc.aio.AioRpcError as error:
            answers[method.name] = error
    return answers


def test_every_trial_call_has_a_request_here() -> None:
    assert set(TRIAL_REQUESTS) == TRIAL_RPCS


async def test_its_own_open_trial_makes_the_trial_calls_and_nothing_else(
    api: api_pb2_grpc.DeterminedStub, gateway: Gateway, event_store: EventStore
) -> None:
    await trials(api, gateway, event_store)
    answers = await walk(api, token(1, "1.1"))
    assert {name for name, error in answers.items() if error is None} == TRIAL_RPCS
    for name, error in answers.items():
        if name not in TRIAL_RPCS:
            assert error is not None and error.code() == grpc.StatusCode.PERMISSION_DENIED, name
            assert "allocation token (trial 1's) is good only for a trial process's own calls" in (
                error.details() or ""
            ) and f"not for {name}" in (error.details() or "")


async def test_another_trials_token_is_refused_everywhere(
    api: api_pb2_grpc.DeterminedStub, gateway: Gateway, event_store: EventStore
) -> None:
    await trials(api, gateway, event_store)
    before = await event_store.last_sequence()
    answers = await walk(api, token(2, "2.1"))
    refusals = {name: (error.code(), error.details()) for name, error in answers.items() if error is not None}
    assert set(refusals) == set(answers)
    assert {code for code, _ in refusals.values()} == {grpc.StatusCode.PERMISSION_DENIED}
    assert "trial 2 may delete its own checkpoints only" in refusals["DeleteCheckpoints"][1]
    assert refusals["ReportProgress"][1] == "the allocation token is for trial 2, not trial 1"
    assert refusals["WatchAllocation"][1] == "the allocation token is for allocation 2.1, not 1.1"
    assert await event_store.last_sequence() == before  # nothing was appended


async def test_a_closed_allocations_token_is_refused_everywhere(
    api: api_pb2_grpc.DeterminedStub, gateway: Gateway, event_store: EventStore
) -> None:
    await trials(api, gateway, event_store)
    exited = events_pb2.AllocationExited(allocation_id="1.1", trial_id=1, exit_code=0)
    await event_store.append(Append("allocation/1.1", exited, "exited-1.1"), actor="service:agent")
    assert await gateway.projector.catch_up()
    before = await event_store.last_sequence()
    answers = await walk(api, token(1, "1.1"))
    for name, error in answers.items():
        assert error is not None, f"{name} accepted a closed allocation's token"
        if name in TRIAL_RPCS:  # the harness reads FAILED_PRECONDITION as "stop for good"
            assert error.code() == grpc.StatusCode.FAILED_PRECONDITION, name
            assert (
                error.details() == "allocation 1.1 of trial 1 is closed (exited); reports from it are refused"
            )
        else:
            assert error.code() == grpc.StatusCode.PERMISSION_DENIED, name
    assert await event_store.last_sequence() == before
    unknown = await refused(api.ReportProgress(TRIAL_REQUESTS["ReportProgress"], metadata=token(1, "1.9")))
    assert unknown.code() == grpc.StatusCode.FAILED_PRECONDITION and "unknown" in (unknown.details() or "")


def routes(gateway: Gateway) -> list[tuple[str, str]]:
    """(method, path) of every route the HTTP API serves, its parameters filled in."""
    found: list[tuple[str, str]] = []
    for route in http_api(gateway.api, gateway.user_directory).routes:  # type: ignore[arg-type]
        if isinstance(route, Mount):
            found.append(("GET", route.path + "/index.html"))
            continue
        if isinstance(route, WebSocketRoute):  # the proxy's (test_gateway_proxy.py refuses the token there)
            continue
        assert isinstance(route, Route)
        path = re.sub(r"\{(\w+)(:\w+)?\}", lambda m: PATH_VALUES[m.group(1)], route.path)
        found += [(method, path) for method in sorted(route.methods or ["GET"]) if method != "HEAD"]
    return found


async def test_no_http_route_takes_an_allocation_token(
    api: api_pb2_grpc.DeterminedStub, gateway: Gateway, event_store: EventStore, http: httpx.AsyncClient
) -> None:
    await trials(api, gateway, event_store)
    admin = await logged_in(api)  # before the walk's failed logins from this address
    own, other = token(1, "1.1")[0][1], token(2, "2.1")[0][1]
    walked = routes(gateway)
    assert ("POST", "/api/v1/experiments/1/kill") in walked and ("GET", "/health") in walked
    # The routes that need a login (asked once each: no allocation's state changes that).
    needing_a_login = {
        (method, path)
        for method, path in walked
        if "not logged in" in (await http.request(method, path)).text
    }
    for closed in (False, True):
        if closed:
            exited = events_pb2.AllocationExited(allocation_id="1.1", trial_id=1, exit_code=0)
            await event_store.append(Append("allocation/1.1", exited, "exited-1.1"), actor="service:agent")
            assert await gateway.projector.catch_up()
        for method, path in walked:
            for value in (own, other):
                answer = await http.request(method, path, headers={"x-allocation-token": value})
                assert answer.status_code == 403, (method, path, answer.text)
                assert "an allocation token is good for no HTTP route" in answer.json()["message"]
                if (method, path) in needing_a_login:
                    answer = await http.request(method, path, headers={"authorization": f"Bearer {value}"})
                    assert answer.status_code == 401, (method, path, answer.text)
                    assert "an allocation token is not a user's session token" in answer.json()["message"]
    # All but /info, /health, /metrics (open to loopback: test_gateway_monitoring.py), login, the web
    # UI's and /api/v1/master (Determined's /info).
    assert len(needing_a_login) == len(walked) - 8
    experiment = await api.GetExperiment(api_pb2.GetExperimentRequest(experiment_id=1), metadata=admin)
    assert experiment.experiment.state == "ACTIVE"  # the kill and pause routes did nothing
