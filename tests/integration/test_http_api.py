"""The HTTP/JSON API beside gRPC, against a real gateway (uvicorn in its
process), nats-server and PostgreSQL: authentication on every route,
Determined's paths and field names, filters, downsampled metrics and
followed logs."""

import asyncio
import base64
import contextlib
import io
import json
import tarfile
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import grpc
import httpx
import pytest
from integration.test_gateway import SECRET, given_trial, stored, trial_metadata

from deploy.local.servers import free_port
from determined.common.passwords import salted_hash
from determined.proto import api_pb2, api_pb2_grpc, events_pb2
from services.common.envelope import Append
from services.common.eventstore import EventStore
from services.gateway.server import Gateway, PortInUseError
from services.gateway.settings import GatewaySettings

PASSWORD = "Initial-Pass1"
CONFIG = """
name: {name}
entrypoint: python3 train.py
searcher: {{name: single, metric: loss, max_length: 10}}
hyperparameters: {{lr: 0.1}}
"""
# Every route that needs a token, with its method.
PROTECTED = [
    ("POST", "/api/v1/auth/logout"),
    ("GET", "/api/v1/me"),
    ("GET", "/api/v1/experiments"),
    ("POST", "/api/v1/experiments"),
    ("GET", "/api/v1/experiments/1"),
    ("POST", "/api/v1/experiments/1/kill"),
    ("POST", "/api/v1/experiments/1/pause"),
    ("POST", "/api/v1/experiments/1/activate"),
    ("GET", "/api/v1/experiments/1/trials"),
    ("GET", "/api/v1/experiments/1/checkpoints"),
    ("GET", "/api/v1/trials/1"),
    ("GET", "/api/v1/trials/1/metrics?metric=loss"),
    ("GET", "/api/v1/trials/1/logs"),
    ("GET", "/api/v1/trials/1/checkpoints"),
    ("GET", "/api/v1/checkpoints/c-1"),
    ("GET", "/api/v1/checkpoints/c-1/files/model.pt"),
    ("GET", "/api/v1/agents"),
    ("GET", "/api/v1/job-queues"),
    ("GET", "/api/v1/job-queues-v2"),
    ("GET", "/api/v1/resource-pools"),
    ("GET", "/api/v1/users"),
    ("DELETE", "/api/v1/experiments/1"),
    ("GET", "/api/v1/experiments/stream"),
    ("GET", "/api/v1/experiments/1/stream"),
    ("GET", "/api/v1/trials/1/stream"),
    ("GET", "/api/v1/cluster/stream"),
]


@pytest.fixture
async def gateway(nats_url: str, namespace: str, database_url: str) -> AsyncIterator[Gateway]:
    settings = GatewaySettings(
        nats_url=nats_url,
        namespace=namespace,
        database_url=database_url,
        gateway_port=free_port(),
        gateway_host="127.0.0.1",
        http_port=0,
        cluster_secret=SECRET,
        cluster_id="test-cluster",
        grace_period_s=0.1,
        initial_user_password=PASSWORD,
    )
    started = await Gateway.start(settings)
    yield started
    await started.stop()


@pytest.fixture
async def token(http: httpx.AsyncClient) -> str:
    """The admin's token, from a login as Determined's clients send it."""
    answer = await http.post(
        "/api/v1/auth/login", json={"username": "admin", "password": salted_hash(PASSWORD), "isHashed": True}
    )
    assert answer.status_code == 200, answer.text
    return str(answer.json()["token"])


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


async def create(api: api_pb2_grpc.DeterminedStub, token: str, name: str, activate: bool = True) -> int:
    request = api_pb2.CreateExperimentRequest(config_yaml=CONFIG.format(name=name), activate=activate)
    created = await api.CreateExperiment(request, metadata=(("authorization", f"Bearer {token}"),))
    return int(created.experiment_id)


async def test_info_and_health_need_no_token(http: httpx.AsyncClient) -> None:
    info = await http.get("/info")
    assert info.status_code == 200
    assert info.json()["cluster_id"] == "test-cluster" and info.json()["version"]
    health = await http.get("/health")
    assert health.status_code == 200
    body = health.json()
    assert {key: body[key] for key in ("status", "eventLog", "readModels")} == {
        "status": "ok",
        "eventLog": "up",
        "readModels": "up",
    }
    assert body["projector"]["state"] in ("caught up", "behind") and body["skippedEvents"]["count"] == 0


async def test_the_web_ui_is_served_without_a_token(http: httpx.AsyncClient) -> None:
    for path in ("/", "/index.html"):
        page = await http.get(path)
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert '<main id="view">' in page.text and "/ui/app.js" in page.text
    for asset, kind in (
        ("/ui/app.js", "javascript"),
        ("/ui/pages/experiments.js", "javascript"),
        ("/ui/style.css", "text/css"),
        ("/ui/vendor/uPlot.iife.min.js", "javascript"),
    ):
        answer = await http.get(asset)
        assert answer.status_code == 200 and kind in answer.headers["content-type"], asset
    missing = await http.get("/ui/no-such-file.js")
    assert missing.status_code == 404


async def test_every_other_route_refuses_no_token_and_a_wrong_one(http: httpx.AsyncClient) -> None:
    for headers in ({}, bearer("not-a-token"), {"authorization": "Basic YWRtaW46"}):
        for method, path in PROTECTED:
            answer = await http.request(method, path, headers=headers)
            assert answer.status_code == 401, (method, path, headers, answer.text)
            body = answer.json()
            assert body["code"] == grpc.StatusCode.UNAUTHENTICATED.value[0]
            assert "det user login" in body["message"]


async def test_login_me_logout(http: httpx.AsyncClient) -> None:
    wrong = await http.post("/api/v1/auth/login", json={"username": "admin", "password": "nope"})
    assert wrong.status_code == 401
    assert "nope" not in wrong.text
    plain = await http.post("/api/v1/auth/login", json={"username": "admin", "password": PASSWORD})
    assert plain.status_code == 200
    token = plain.json()["token"]
    assert plain.json()["user"]["username"] == "admin" and plain.json()["user"]["admin"] is True
    me = await http.get("/api/v1/me", headers=bearer(token))
    assert me.status_code == 200
    assert me.json()["user"]["username"] == "admin"
    assert (await http.post("/api/v1/auth/logout", headers=bearer(token))).status_code == 200
    assert (await http.get("/api/v1/me", headers=bearer(token))).status_code == 401
    not_json = await http.post(
        "/api/v1/auth/login", content=b"{", headers={"content-type": "application/json"}
    )
    assert not_json.status_code == 400


async def test_experiments_list_filters_sorts_and_pages(
    http: httpx.AsyncClient, api: api_pb2_grpc.DeterminedStub, gateway: Gateway, token: str
) -> None:
    for name in ("mnist-a", "cifar", "mnist-b"):
        await create(api, token, name)
    await create(api, token, "paused-one", activate=False)
    assert await gateway.projector.catch_up()
    headers = bearer(token)

    async def listed(query: str) -> tuple[list[str], dict[str, int]]:
        answer = await http.get(f"/api/v1/experiments?{query}", headers=headers)
        assert answer.status_code == 200, answer.text
        return [e["name"] for e in answer.json()["experiments"]], answer.json()["pagination"]

    names, pagination = await listed("")
    assert names == ["mnist-a", "cifar", "mnist-b", "paused-one"] and pagination["total"] == 4
    assert (await listed("name=MNIST"))[0] == ["mnist-a", "mnist-b"]
    assert (await listed("states=STATE_PAUSED"))[0] == ["paused-one"]
    assert (await listed("states=STATE_ACTIVE,STATE_PAUSED&users=admin"))[1]["total"] == 4
    assert (await listed("users=someone-else"))[0] == []
    assert (await listed("sortBy=SORT_BY_NAME&orderBy=ORDER_BY_DESC"))[0][0] == "paused-one"
    names, pagination = await listed("sortBy=SORT_BY_ID&orderBy=ORDER_BY_DESC&offset=1&limit=2")
    assert names == ["mnist-b", "cifar"]
    assert pagination == {"offset": 1, "limit": 2, "startIndex": 1, "endIndex": 3, "total": 4}
    bad = await http.get("/api/v1/experiments?sortBy=SORT_BY_COLOUR", headers=headers)
    assert bad.status_code == 400 and "sortBy" in bad.json()["message"]
    assert (await http.get("/api/v1/experiments?limit=x", headers=headers)).status_code == 400

    [first] = [
        e
        for e in (await http.get("/api/v1/experiments", headers=headers)).json()["experiments"]
        if e["name"] == "mnist-a"
    ]
    assert first["state"] == "STATE_ACTIVE" and first["username"] == "admin"
    assert first["searcherType"] == "single" and first["startTime"].endswith("Z")


async def test_experiment_get_trials_and_actions(
    http: httpx.AsyncClient, api: api_pb2_grpc.DeterminedStub, token: str
) -> None:
    experiment_id = await create(api, token, "acted-on")
    headers = bearer(token)
    got = await http.get(f"/api/v1/experiments/{experiment_id}", headers=headers)
    assert got.status_code == 200
    assert got.json()["experiment"]["name"] == "acted-on"
    assert got.json()["config"]["searcher"]["metric"] == "loss"
    trials = (await http.get(f"/api/v1/experiments/{experiment_id}/trials", headers=headers)).json()
    assert trials["trials"] == [] and trials["pagination"]["total"] == 0
    paused = await http.post(f"/api/v1/experiments/{experiment_id}/pause", headers=headers)
    assert paused.status_code == 200 and paused.json() == {"unchangedReason": ""}

    async def state() -> str:
        answer = await http.get(f"/api/v1/experiments/{experiment_id}", headers=headers)
        return str(answer.json()["experiment"]["state"])

    await until_equal(state, "STATE_PAUSED")
    assert (
        await http.post(f"/api/v1/experiments/{experiment_id}/activate", headers=headers)
    ).status_code == 200
    await until_equal(state, "STATE_ACTIVE")
    assert (await http.post(f"/api/v1/experiments/{experiment_id}/kill", headers=headers)).status_code == 200
    missing = await http.get("/api/v1/experiments/999", headers=headers)
    assert missing.status_code == 404 and missing.json()["code"] == grpc.StatusCode.NOT_FOUND.value[0]
    assert (await http.get("/api/v1/checkpoints/no-such-uuid", headers=headers)).status_code == 404
    assert (await http.get("/api/v1/nowhere", headers=headers)).status_code == 404


async def test_trial_metrics_are_downsampled(
    http: httpx.AsyncClient,
    api: api_pb2_grpc.DeterminedStub,
    gateway: Gateway,
    event_store: EventStore,
    token: str,
) -> None:
    await given_trial(event_store, gateway)
    steps = range(1, 5001)
    spike = 2345
    for batch, start in enumerate(range(0, len(steps), 1000), start=1):
        reports = [
            events_pb2.MetricReport(
                group="training",
                steps_completed=s,
                metrics_json=json.dumps({"loss": 100.0 if s == spike else 1 / s}),
            )
            for s in steps[start : start + 1000]
        ]
        request = api_pb2.ReportMetricsRequest(trial_id=1, trial_run_id=1, batch_seq=batch, reports=reports)
        await api.ReportMetrics(request, metadata=trial_metadata(1))
    assert await gateway.projector.catch_up()
    headers = bearer(token)
    answer = await http.get("/api/v1/trials/1/metrics?metric=loss&max_points=100", headers=headers)
    assert answer.status_code == 200, answer.text
    chart = answer.json()
    assert chart["totalPoints"] == 5000 and len(chart["steps"]) == len(chart["values"]) == 100
    assert chart["steps"][0] == 1 and chart["steps"][-1] == 5000
    assert chart["values"][0] == 1.0 and chart["steps"] == sorted(chart["steps"])
    assert spike in chart["steps"]  # the curve's shape: a spike is not sampled away
    default = (await http.get("/api/v1/trials/1/metrics?metric=loss", headers=headers)).json()
    assert len(default["steps"]) == 1000
    none = (await http.get("/api/v1/trials/1/metrics?metric=accuracy", headers=headers)).json()
    assert none["totalPoints"] == 0 and none["steps"] == []
    assert (await http.get("/api/v1/trials/1/metrics", headers=headers)).status_code == 400
    assert (
        await http.get("/api/v1/trials/1/metrics?metric=loss&max_points=2", headers=headers)
    ).status_code == 400
    assert (await http.get("/api/v1/trials/9/metrics?metric=loss", headers=headers)).status_code == 404

    trial = (await http.get("/api/v1/trials/1", headers=headers)).json()
    assert trial["trial"]["latestTraining"]["metrics"]["avgMetrics"] == {"loss": 1 / 5000}
    assert trial["trial"]["hparams"] == {"lr": 0.1} and trial["runs"][0]["allocationId"] == "1.1"


async def test_trial_logs_stream_as_ndjson_and_follow(
    http: httpx.AsyncClient, gateway: Gateway, event_store: EventStore, token: str
) -> None:
    await given_trial(event_store, gateway)
    lines = [events_pb2.LogLine(log="hello", stdtype="stdout"), events_pb2.LogLine(log="bye", rank=0)]
    await event_store.logs.publish(events_pb2.LogBatch(trial_id=1, allocation_id="1.1", lines=lines[:1]))
    headers = bearer(token)
    stored = await http.get("/api/v1/trials/1/logs", headers=headers)
    assert stored.status_code == 200
    assert [json.loads(line)["result"]["log"] for line in stored.text.splitlines()] == ["hello"]

    async def follow() -> list[str]:
        async with http.stream("GET", "/api/v1/trials/1/logs?follow=true", headers=headers) as answer:
            return [json.loads(line)["result"]["log"] async for line in answer.aiter_lines() if line]

    following = asyncio.create_task(follow())
    ended = events_pb2.TrialEnded(trial_id=1, experiment_id=1, state=events_pb2.TRIAL_STATE_COMPLETED)
    await event_store.append(Append("trial/1", ended, "end-1"), actor="service:scheduler")
    assert await gateway.projector.catch_up()
    last = events_pb2.LogBatch(trial_id=1, allocation_id="1.1", lines=lines[1:], allocation_ended=True)
    await event_store.logs.publish(last)
    assert await asyncio.wait_for(following, 10) == ["hello", "bye"]
    assert (await http.get("/api/v1/trials/9/logs", headers=headers)).status_code == 404


async def test_cluster_routes(
    http: httpx.AsyncClient, gateway: Gateway, event_store: EventStore, token: str
) -> None:
    slots = [events_pb2.Slot(slot_id=0, type="cpu")]
    registered = events_pb2.AgentRegistered(agent_id="a1", hostname="h", slots=slots)
    await event_store.append(Append("agent/a1", registered, "agent-a1"), actor="service:agent")
    assert await gateway.projector.catch_up()
    [agent] = (await http.get("/api/v1/agents", headers=bearer(token))).json()["agents"]
    assert agent["id"] == "a1" and agent["enabled"] is True
    assert agent["slots"]["0"]["device"]["type"] == "TYPE_CPU" and agent["slots"]["0"]["container"] is None
    assert agent["slotStats"]["typeStats"]["TYPE_CPU"]["total"] == 1 and agent["containers"] == {}
    jobs = await http.get("/api/v1/job-queues", headers=bearer(token))
    assert jobs.status_code == 200 and jobs.json()["jobs"] == []
    jobs_v2 = (await http.get("/api/v1/job-queues-v2", headers=bearer(token))).json()
    assert jobs_v2 == {"jobs": [], "pagination": {**jobs_v2["pagination"], "total": 0}}
    [pool] = (await http.get("/api/v1/resource-pools", headers=bearer(token))).json()["resourcePools"]
    assert (pool["name"], pool["defaultComputePool"], pool["slotsAvailable"]) == ("default", True, 1)
    assert pool["schedulerType"].startswith("SCHEDULER_TYPE_") and pool["slotType"] == "TYPE_CPU"
    users = (await http.get("/api/v1/users", headers=bearer(token))).json()["users"]
    assert {"admin", "determined"} <= {user["username"] for user in users}
    master = (await http.get("/api/v1/master")).json()  # open, as /info
    assert master["clusterId"] == "test-cluster" and master["strictJobQueueControl"] is False


async def test_a_taken_http_port_is_refused(gateway: Gateway) -> None:
    assert gateway.http is not None
    settings = gateway.settings.model_copy(
        update={"gateway_port": free_port(), "http_port": gateway.http.port}
    )
    with pytest.raises(PortInUseError, match=f"HTTP port {gateway.http.port}"):
        await Gateway.start(settings)


async def until_equal(read: Callable[[], Awaitable[str]], expected: str, deadline_s: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline_s
    while (current := await read()) != expected:
        assert loop.time() < end, f"still {current}, not {expected}"
        await asyncio.sleep(0.05)


async def test_a_checkpoint_file_downloads(
    http: httpx.AsyncClient,
    api: api_pb2_grpc.DeterminedStub,
    gateway: Gateway,
    event_store: EventStore,
    token: str,
    tmp_path: Path,
) -> None:
    storage = f"checkpoint_storage: {{type: shared_fs, host_path: {tmp_path}}}"
    request = api_pb2.CreateExperimentRequest(config_yaml=CONFIG.format(name="ckpt") + storage, activate=True)
    await api.CreateExperiment(request, metadata=(("authorization", f"Bearer {token}"),))
    await given_trial(event_store, gateway)
    big = bytes(range(256)) * 10_000  # several DownloadCheckpointFile responses
    (tmp_path / "c-1" / "sub").mkdir(parents=True)
    (tmp_path / "c-1" / "sub" / "model.pt").write_bytes(big)
    report = api_pb2.ReportCheckpointRequest(
        uuid="c-1", trial_id=1, allocation_id="1.1", steps_completed=10, resources={"sub/model.pt": len(big)}
    )
    await api.ReportCheckpoint(report, metadata=trial_metadata(1))
    assert await gateway.projector.catch_up()
    headers = bearer(token)
    answer = await http.get("/api/v1/checkpoints/c-1/files/sub/model.pt", headers=headers)
    assert answer.status_code == 200 and answer.content == big
    assert answer.headers["content-length"] == str(len(big))
    assert answer.headers["content-disposition"] == "attachment; filename*=UTF-8''model.pt"
    for path in ("nope.pt", "../../etc/passwd"):
        assert (await http.get(f"/api/v1/checkpoints/c-1/files/{path}", headers=headers)).status_code == 404
    assert (await http.get("/api/v1/checkpoints/c-9/files/x", headers=headers)).status_code == 404


async def test_the_experiments_list_shows_the_best_metric(
    http: httpx.AsyncClient,
    gateway: Gateway,
    api: api_pb2_grpc.DeterminedStub,
    event_store: EventStore,
    token: str,
) -> None:
    experiment_id = await create(api, token, "best")
    assert await gateway.projector.catch_up()
    [listed] = (await http.get("/api/v1/experiments", headers=bearer(token))).json()["experiments"]
    assert listed["bestTrialSearcherMetric"] is None
    created = events_pb2.TrialCreated(trial_id=1, experiment_id=experiment_id)
    await event_store.append(Append("trial/1", created, "best-trial"), actor="service:searcher")
    validated = events_pb2.TrialValidationReported(
        trial_id=1,
        experiment_id=experiment_id,
        trial_run_id=1,
        steps_completed=5,
        metrics_json='{"loss": 0.25}',
    )
    await event_store.append(Append("validation/1", validated, "best-validation"), actor="service:gateway")
    assert await gateway.projector.catch_up()
    [listed] = (await http.get("/api/v1/experiments", headers=bearer(token))).json()["experiments"]
    assert listed["bestTrialSearcherMetric"] == 0.25
    shown = (await http.get(f"/api/v1/experiments/{experiment_id}", headers=bearer(token))).json()
    assert shown["experiment"]["bestTrialSearcherMetric"] == 0.25
    answer = await api.GetExperiments(
        api_pb2.GetExperimentsRequest(), metadata=(("authorization", f"Bearer {token}"),)
    )
    assert [e.best_trial_searcher_metric for e in answer.experiments] == [0.25]


async def validated(event_store: EventStore, experiment_id: int, trial_id: int, losses: list[float]) -> None:
    """Trial `trial_id` of the experiment, with one validation per loss."""
    created = events_pb2.TrialCreated(trial_id=trial_id, experiment_id=experiment_id)
    await event_store.append(Append(f"trial/{trial_id}", created, f"t-{trial_id}"), actor="service:searcher")
    for steps, loss in enumerate(losses, start=1):
        validation = events_pb2.TrialValidationReported(
            trial_id=trial_id,
            experiment_id=experiment_id,
            trial_run_id=1,
            steps_completed=steps,
            metrics_json=json.dumps({"loss": loss}),
        )
        await event_store.append(
            Append(f"validation/{trial_id}", validation, f"v-{trial_id}-{steps}"), actor="service:gateway"
        )


async def test_trials_show_their_best_metric_and_the_list_sorts_by_it(
    http: httpx.AsyncClient,
    gateway: Gateway,
    api: api_pb2_grpc.DeterminedStub,
    event_store: EventStore,
    token: str,
) -> None:
    first, second, unvalidated = [
        await create(api, token, name) for name in ("first", "second", "unvalidated")
    ]
    await validated(event_store, first, 1, [0.5, 0.25, 0.75])
    await validated(event_store, first, 2, [])
    await validated(event_store, second, 3, [0.125])
    assert await gateway.projector.catch_up()
    headers = bearer(token)
    trials = (await http.get(f"/api/v1/experiments/{first}/trials", headers=headers)).json()["trials"]
    assert [(t["id"], t["searcherMetricValue"]) for t in trials] == [(1, 0.25), (2, None)]
    assert (await http.get("/api/v1/trials/3", headers=headers)).json()["trial"][
        "searcherMetricValue"
    ] == 0.125
    answer = await api.GetTrial(
        api_pb2.GetTrialRequest(trial_id=1), metadata=(("authorization", f"Bearer {token}"),)
    )
    assert answer.trial.searcher_metric_value == 0.25

    async def sorted_ids(order: str) -> list[int]:
        params = {"sortBy": "SORT_BY_BEST_TRIAL_SEARCHER_METRIC", "orderBy": order}
        listed = (await http.get("/api/v1/experiments", params=params, headers=headers)).json()["experiments"]
        return [e["id"] for e in listed]

    assert await sorted_ids("ORDER_BY_ASC") == [second, first, unvalidated]
    assert await sorted_ids("ORDER_BY_DESC") == [first, second, unvalidated]  # none still last


async def test_an_experiment_is_created_with_determineds_body(
    http: httpx.AsyncClient, gateway: Gateway, event_store: EventStore, token: str
) -> None:
    headers = bearer(token)
    train_py = base64.b64encode(b"print('hello')\n").decode()
    body = {
        "config": CONFIG.format(name="over-http"),
        "activate": True,
        "modelDefinition": [
            {"path": "pkg", "type": "FILE_TYPE_DIRECTORY", "mode": 0o755},
            {
                "path": "pkg/train.py",
                "type": "FILE_TYPE_FILE",
                "content": train_py,
                "mode": 0o644,
                "mtime": "7",
            },
        ],
        "requestId": "http-create-1",
    }
    answer = await http.post("/api/v1/experiments", json=body, headers=headers)
    assert answer.status_code == 200, answer.text
    created = answer.json()
    assert (created["experiment"]["name"], created["experiment"]["state"]) == ("over-http", "STATE_ACTIVE")
    assert created["experiment"]["username"] == "admin"
    assert created["config"]["searcher"]["metric"] == "loss"
    assert any("max_length is deprecated" in warning for warning in created["configWarnings"])
    again = await http.post("/api/v1/experiments", json=body, headers=headers)  # a retry: the same experiment
    assert again.json()["experiment"]["id"] == created["experiment"]["id"]

    [event] = [e.experiment_created for e in await stored(event_store, "experiment")]
    with tarfile.open(fileobj=io.BytesIO(await event_store.contexts.get(event.context_hash))) as tar:
        pkg = tar.extractfile("pkg/train.py")
        assert pkg is not None and pkg.read() == b"print('hello')\n"
        assert tar.getmember("pkg").isdir()

    paused = await http.post(
        "/api/v1/experiments", json={"config": CONFIG.format(name="paused")}, headers=headers
    )
    assert paused.json()["experiment"]["state"] == "STATE_PAUSED"  # Determined's default: not activated
    checked = await http.post(
        "/api/v1/experiments",
        json={"config": CONFIG.format(name="checked"), "validateOnly": True},
        headers=headers,
    )
    assert checked.status_code == 200 and checked.json()["experiment"]["id"] == 0
    listed = (await http.get("/api/v1/experiments", headers=headers)).json()["experiments"]
    assert [e["name"] for e in listed] == ["over-http", "paused"]


async def test_a_bad_experiment_body_is_refused_saying_what_is_wrong(
    http: httpx.AsyncClient, token: str
) -> None:
    bad_config = CONFIG.format(name="bad").replace("metric: loss, ", "")
    for body, words in [
        ({}, "config is required"),
        ({"config": bad_config}, "searcher"),
        ({"config": "name: [unclosed"}, "invalid experiment config"),
        ({"config": CONFIG.format(name="x"), "activate": "yes"}, "activate must be true or false"),
        ({"config": CONFIG.format(name="x"), "parentId": "three"}, "parentId must be an experiment id"),
        (
            {"config": CONFIG.format(name="x"), "modelDefinition": [{"path": "../up.py", "content": ""}]},
            "modelDefinition[0] (../up.py)",
        ),
        (
            {"config": CONFIG.format(name="x"), "modelDefinition": [{"path": "a.py", "content": "%%"}]},
            "not base64",
        ),
    ]:
        answer = await http.post("/api/v1/experiments", json=body, headers=bearer(token))
        assert answer.status_code == 400, (body, answer.text)
        assert words in answer.json()["message"], (words, answer.json()["message"])
    listed = (await http.get("/api/v1/experiments", headers=bearer(token))).json()["experiments"]
    assert listed == []


class Notices:
    """A page's server-sent events, read as the browser's EventSource would: the
    events' names, in order, read by a task of their own."""

    def __init__(self) -> None:
        self.events: asyncio.Queue[str] = asyncio.Queue()

    async def read(self, lines: AsyncIterator[str]) -> None:
        async for line in lines:
            if line.startswith("event: "):
                await self.events.put(line.removeprefix("event: "))

    async def next_event(self, timeout_s: float = 10.0) -> str:
        return await asyncio.wait_for(self.events.get(), timeout_s)

    async def quiet(self, for_s: float) -> bool:
        """Whether no event comes within `for_s`."""
        try:
            await self.next_event(for_s)
        except TimeoutError:
            return True
        return False


@contextlib.asynccontextmanager
async def notices(http: httpx.AsyncClient, path: str, token: str) -> AsyncIterator[Notices]:
    async with http.stream("GET", path, params={"token": token}) as answer:
        assert answer.status_code == 200, await answer.aread()
        assert answer.headers["content-type"].startswith("text/event-stream")
        lines = answer.aiter_lines()
        assert await anext(lines) == "retry: 2000"  # the stream is open: the page's watch is in place
        heard = Notices()
        reader = asyncio.create_task(heard.read(lines))
        try:
            yield heard
        finally:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)


async def test_live_pages_hear_of_the_changes_they_show(
    http: httpx.AsyncClient, gateway: Gateway, event_store: EventStore, token: str
) -> None:
    headers = bearer(token)

    async def append(subject: str, payload: object, msg_id: str) -> None:
        await event_store.append(Append(subject, payload, msg_id), actor="service:test")

    async with notices(http, "/api/v1/experiments/stream", token) as experiments:
        created = await http.post(
            "/api/v1/experiments", json={"config": CONFIG.format(name="live")}, headers=headers
        )
        experiment_id = created.json()["experiment"]["id"]
        assert await experiments.next_event() == "changed"
        assert await experiments.quiet(1.0)  # one change, one notice

    async with (
        notices(http, f"/api/v1/experiments/{experiment_id}/stream", token) as experiment,
        notices(http, "/api/v1/cluster/stream", token) as cluster,
    ):
        await append("trial/1", events_pb2.TrialCreated(trial_id=1, experiment_id=experiment_id), "t1")
        assert await experiment.next_event() == "changed"
        assert await cluster.quiet(1.0)  # a new trial is not on the cluster page
        # An allocation's start names only its trial: the experiment's page waits on its trials too.
        await append("allocation/1.1", events_pb2.AllocationStarted(allocation_id="1.1"), "s1")
        assert await experiment.next_event() == "changed"
        assert await cluster.next_event() == "changed"

    async with notices(http, "/api/v1/trials/1/stream", token) as trial:
        metrics = events_pb2.TrialMetricsReported(
            trial_id=1,
            experiment_id=experiment_id,
            trial_run_id=1,
            reports=[
                events_pb2.MetricReport(group="training", steps_completed=1, metrics_json='{"loss": 1}')
            ],
        )
        await append("metrics/1", metrics, "m1")
        assert await trial.next_event() == "changed"
        await append("trial/2", events_pb2.TrialCreated(trial_id=2, experiment_id=experiment_id), "t2")
        assert await trial.quiet(1.0)  # another trial's change

    assert (await http.get("/api/v1/trials/9/stream", headers=headers)).status_code == 404
    assert (await http.get("/api/v1/experiments/9/stream", headers=headers)).status_code == 404
    # The token as a query parameter is taken on the streams only.
    assert (await http.get("/api/v1/experiments", params={"token": token})).status_code == 401
