"""Notebooks, TensorBoards, commands and shells at the gateway, against a real
nats-server and PostgreSQL (one gateway for the module): LaunchTask's one
AllocationRequested and its refusals, the tasks' read model driven by the
allocation events an agent and the scheduler would append, GetTasks,
GetTask, KillTask, TaskLogs, the proxy's lookup, a task's job (GetJobs,
UpdateJob with a running scheduler), and the HTTP routes."""

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
import httpx
import pytest
from google.protobuf.message import Message
from support import module_gateway
from support.security_gateway import PASSWORD
from test_gateway import stored

from determined.common.passwords import salted_hash
from determined.proto import api_pb2, api_pb2_grpc, events_pb2
from services.common.envelope import Append
from services.common.eventstore import EventStore
from services.gateway.features.tasks.queries import proxy_target
from services.gateway.server import Gateway
from services.scheduler.__main__ import SchedulerSettings
from services.scheduler.__main__ import run as run_scheduler

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGx0 alice@laptop"
EXPERIMENT = """
entrypoint: python3 train.py
searcher: {name: single, metric: loss, max_length: 10}
"""
Metadata = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Users:
    admin: Metadata
    alice: Metadata
    mallory: Metadata
    alice_token: str
    mallory_token: str


module_namespace = module_gateway.module_namespace
gateway = module_gateway.gateway
store = module_gateway.store
stub = module_gateway.stub
web = module_gateway.web


@pytest.fixture(scope="module")
async def users(stub: api_pb2_grpc.DeterminedStub) -> Users:
    async def login(username: str) -> str:
        request = api_pb2.LoginRequest(username=username, password=salted_hash(PASSWORD), is_hashed=True)
        return str((await stub.Login(request)).token)

    admin = _bearer(await login("admin"))
    for name in ("alice", "mallory"):
        request = api_pb2.CreateUserRequest(username=name, password=salted_hash(PASSWORD), is_hashed=True)
        await stub.CreateUser(request, metadata=admin)
    alice, mallory = await login("alice"), await login("mallory")
    return Users(admin, _bearer(alice), _bearer(mallory), alice, mallory)


def _bearer(token: str) -> Metadata:
    return (("authorization", f"Bearer {token}"),)


async def launch(
    stub: api_pb2_grpc.DeterminedStub, who: Metadata, task_type: str = "NOTEBOOK", **fields: object
) -> api_pb2.LaunchTaskResponse:
    return await stub.LaunchTask(api_pb2.LaunchTaskRequest(task_type=task_type, **fields), metadata=who)  # type: ignore[arg-type]


async def append(
    store: EventStore, gateway: Gateway, task: api_pb2.Task, payload: Message, name: str
) -> None:
    """An allocation event of the task, as the scheduler or its agent appends it."""
    aggregate = f"allocation/{task.allocation_id}"
    await store.append(Append(aggregate, payload, f"{name}-{task.allocation_id}"), actor="service:test")
    assert await gateway.projector.catch_up()


async def run(
    store: EventStore, gateway: Gateway, task: api_pb2.Task, address: str = "127.0.0.1:4000"
) -> None:
    """Assigned to agent a1, started, and (a server's address) ready."""
    allocation_id = task.allocation_id
    placement = events_pb2.Placement(agent_id="a1", slot_ids=[0])
    await append(store, gateway, task, events_pb2.AllocationAssigned(allocation_id=allocation_id, task_id=task.id, placements=[placement]), "assigned")  # fmt: skip
    await append(
        store,
        gateway,
        task,
        events_pb2.AllocationStarted(allocation_id=allocation_id, agent_id="a1"),
        "started",
    )
    if address:
        ready = events_pb2.AllocationReady(
            allocation_id=allocation_id, task_id=task.id, agent_id="a1", proxy_address=address
        )
        await append(store, gateway, task, ready, "ready")


async def exit_(store: EventStore, gateway: Gateway, task: api_pb2.Task, code: int, **fields: object) -> None:
    exited = events_pb2.AllocationExited(
        allocation_id=task.allocation_id, task_id=task.id, agent_id="a1", exit_code=code, **fields
    )  # type: ignore[arg-type]
    await append(store, gateway, task, exited, "exited")


async def code_of(call: object) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await call  # type: ignore[misc]
    return raised.value.code(), str(raised.value.details())


async def test_a_notebook_is_one_request_and_follows_its_allocation(
    stub: api_pb2_grpc.DeterminedStub, store: EventStore, gateway: Gateway, users: Users
) -> None:
    launched = await launch(stub, users.alice, config_yaml="description: mine\nidle_timeout: 30s")
    task = launched.task
    assert (task.task_type, task.owner, task.state, task.description, task.slots, task.ready) == (
        "NOTEBOOK",
        "alice",
        "PENDING",
        "mine",
        1,
        False,
    )
    assert (task.allocation_id, task.job_id, task.resource_pool) == (
        f"{task.id}.1",
        f"task/{task.id}",
        "default",
    )
    [event] = [e for e in await stored(store, "allocation") if e.allocation_requested.task_id == task.id]
    requested = event.allocation_requested
    assert (requested.owner, requested.preemptible, event.actor) == ("alice", False, "user:alice")
    assert json.loads(requested.task.config_json)["idle_timeout"] == "30s"
    assert await proxy_target(gateway.pool, task.id) is not None

    await run(store, gateway, task)
    running = (await stub.GetTask(api_pb2.GetTaskRequest(task_id=task.id), metadata=users.mallory)).task
    assert (running.state, running.ready, running.agent_id) == ("RUNNING", True, "a1")
    target = await proxy_target(gateway.pool, task.id)
    assert target is not None
    assert (target.owner, target.state, target.proxy_address, target.exit_summary) == (
        "alice",
        "RUNNING",
        "127.0.0.1:4000",
        "",
    )
    listed = await stub.GetTasks(api_pb2.GetTasksRequest(task_type="NOTEBOOK"), metadata=users.mallory)
    assert task.id in [t.id for t in listed.tasks]  # every user sees every task, as experiments

    await exit_(store, gateway, task, 1)
    ended = (await stub.GetTask(api_pb2.GetTaskRequest(task_id=task.id), metadata=users.alice)).task
    assert (ended.state, ended.exit_code, ended.exit_reason, ended.ready) == (
        "TERMINATED",
        1,
        "exited with code 1",
        False,
    )
    target = await proxy_target(gateway.pool, task.id)
    assert target is not None and (target.proxy_address, target.exit_summary) == ("", "exited with code 1")
    shown = await stub.GetTasks(api_pb2.GetTasksRequest(), metadata=users.alice)
    assert task.id not in [t.id for t in shown.tasks]
    every = await stub.GetTasks(api_pb2.GetTasksRequest(include_terminated=True), metadata=users.alice)
    assert task.id in [t.id for t in every.tasks]
    assert await proxy_target(gateway.pool, str(uuid.uuid4())) is None


async def test_a_retried_launch_answers_with_the_first_task(
    stub: api_pb2_grpc.DeterminedStub, store: EventStore, users: Users
) -> None:
    first = await launch(stub, users.alice, "COMMAND", command=["echo", "hi"], request_id="retry-1")
    again = await launch(stub, users.alice, "COMMAND", command=["echo", "hi"], request_id="retry-1")
    other = await launch(stub, users.mallory, "COMMAND", command=["echo", "hi"], request_id="retry-1")
    assert first.task.id == again.task.id != other.task.id
    requests = [
        e for e in await stored(store, "allocation") if e.allocation_requested.task_id == first.task.id
    ]
    assert len(requests) == 1
    assert list(first.task.command) == ["echo", "hi"]


async def test_kills_by_the_owner_or_an_admin_only(
    stub: api_pb2_grpc.DeterminedStub, store: EventStore, gateway: Gateway, users: Users
) -> None:
    task = (await launch(stub, users.alice, "SHELL", shell_public_key=KEY)).task
    await run(store, gateway, task)
    kill = api_pb2.KillTaskRequest(task_id=task.id)
    code, message = await code_of(stub.KillTask(kill, metadata=users.mallory))
    assert code == grpc.StatusCode.PERMISSION_DENIED
    assert (
        message
        == f"task {task.id} belongs to alice: only its owner or an admin may kill it, and mallory is neither"
    )
    assert (await stub.KillTask(kill, metadata=users.admin)).unchanged_reason == ""
    dying = (await stub.GetTask(api_pb2.GetTaskRequest(task_id=task.id), metadata=users.alice)).task
    assert dying.state == "TERMINATING"
    again = await stub.KillTask(kill, metadata=users.alice)
    assert again.unchanged_reason == f"Task {task.id} is being killed already"
    await exit_(store, gateway, task, 143, killed=True)
    ended = (await stub.GetTask(api_pb2.GetTaskRequest(task_id=task.id), metadata=users.alice)).task
    assert (ended.state, ended.exit_code, ended.exit_reason) == ("TERMINATED", 143, "killed by admin")
    after = await stub.KillTask(kill, metadata=users.alice)
    assert after.unchanged_reason == f"Task {task.id} has ended already (killed by admin): nothing to kill"

    pending = (await launch(stub, users.alice)).task
    assert (
        await stub.KillTask(api_pb2.KillTaskRequest(task_id=pending.id), metadata=users.alice)
    ).unchanged_reason == ""
    canceled = events_pb2.AllocationCanceled(
        allocation_id=pending.allocation_id, task_id=pending.id, reason="killed"
    )
    await append(store, gateway, pending, canceled, "canceled")
    shown = (await stub.GetTask(api_pb2.GetTaskRequest(task_id=pending.id), metadata=users.alice)).task
    assert (shown.state, shown.HasField("exit_code"), shown.exit_reason) == (
        "TERMINATED",
        False,
        "canceled before it started: killed by alice",
    )


async def test_a_tensorboard_shows_each_trial_with_its_experiments_storage(
    stub: api_pb2_grpc.DeterminedStub, store: EventStore, gateway: Gateway, users: Users
) -> None:
    created = await stub.CreateExperiment(
        api_pb2.CreateExperimentRequest(config_yaml=EXPERIMENT), metadata=users.admin
    )
    experiment_id = created.experiment_id
    storage = json.loads(created.config_json)["checkpoint_storage"]
    for trial_id in (101, 102):
        trial = events_pb2.TrialCreated(trial_id=trial_id, experiment_id=experiment_id)
        await store.append(Append(f"trial/{trial_id}", trial, f"trial-{trial_id}"), actor="service:searcher")
    launched = await launch(stub, users.alice, "TENSORBOARD", experiment_ids=[experiment_id])
    task = launched.task
    assert (task.slots, list(task.experiment_ids), list(task.trial_ids)) == (0, [experiment_id], [101, 102])
    [event] = [e for e in await stored(store, "allocation") if e.allocation_requested.task_id == task.id]
    sources = event.allocation_requested.task.tensorboard_sources
    assert [(s.experiment_id, s.trial_id, json.loads(s.storage_json)) for s in sources] == [
        (experiment_id, 101, storage),
        (experiment_id, 102, storage),
    ]
    by_trial = await launch(stub, users.alice, "TENSORBOARD", trial_ids=[102])
    assert list(by_trial.task.trial_ids) == [102]
    code, message = await code_of(launch(stub, users.alice, "TENSORBOARD", experiment_ids=[9999]))
    assert (code, message) == (grpc.StatusCode.INVALID_ARGUMENT, "experiment 9999 not found")
    code, message = await code_of(launch(stub, users.alice, "TENSORBOARD", trial_ids=[9999]))
    assert (code, message) == (grpc.StatusCode.INVALID_ARGUMENT, "trial 9999 not found")


@pytest.mark.parametrize(
    ("fields", "status", "message"),
    [
        ({"task_type": "PIANO"}, grpc.StatusCode.INVALID_ARGUMENT, "task_type 'PIANO' is not one of"),
        ({"task_type": "NOTEBOOK", "config_yaml": "resources: {slots: -1}"}, grpc.StatusCode.INVALID_ARGUMENT,
         "invalid task config:\nresources.slots: must be at least 0"),
        ({"task_type": "COMMAND"}, grpc.StatusCode.INVALID_ARGUMENT, "a command needs a command line"),
        ({"task_type": "NOTEBOOK", "context_hash": "0" * 64}, grpc.StatusCode.NOT_FOUND, "upload it with UploadContext first"),
        ({"task_type": "NOTEBOOK", "config_yaml": "resources: {resource_pool: nowhere}"},
         grpc.StatusCode.INVALID_ARGUMENT, "resources.resource_pool 'nowhere' is not a resource pool"),
        ({"task_type": "NOTEBOOK", "request_id": "a b"}, grpc.StatusCode.INVALID_ARGUMENT, "request_id must be"),
    ],
)  # fmt: skip
async def test_bad_launches_are_refused_and_nothing_is_appended(
    stub: api_pb2_grpc.DeterminedStub,
    store: EventStore,
    users: Users,
    fields: dict[str, str],
    status: grpc.StatusCode,
    message: str,
) -> None:
    before = await store.last_sequence()
    code, details = await code_of(stub.LaunchTask(api_pb2.LaunchTaskRequest(**fields), metadata=users.alice))
    assert code == status and message in details
    assert await store.last_sequence() == before


async def test_a_tasks_logs_for_its_owner_and_admins(
    stub: api_pb2_grpc.DeterminedStub, store: EventStore, gateway: Gateway, users: Users
) -> None:
    task = (await launch(stub, users.alice, "COMMAND", command=["echo", "hi"])).task
    await run(store, gateway, task, address="")
    subject = store.logs.task_subject("COMMAND", task.id)
    first = events_pb2.LogBatch(
        allocation_id=task.allocation_id, agent_id="a1", lines=[events_pb2.LogLine(log="hi\n")]
    )
    await store.logs.publish(first, subject=subject)
    logs = api_pb2.TaskLogsRequest(task_id=task.id)
    [stored_lines] = [r async for r in stub.TaskLogs(logs, metadata=users.alice)]
    assert ([line.log for line in stored_lines.lines], stored_lines.agent_id) == (["hi\n"], "a1")
    code, message = await code_of(_drained(stub.TaskLogs(logs, metadata=users.mallory)))
    assert code == grpc.StatusCode.PERMISSION_DENIED and "may read its logs" in message

    following = stub.TaskLogs(api_pb2.TaskLogsRequest(task_id=task.id, follow=True), metadata=users.admin)
    last = events_pb2.LogBatch(
        allocation_id=task.allocation_id,
        agent_id="a1",
        lines=[events_pb2.LogLine(log="bye\n")],
        allocation_ended=True,
    )
    await store.logs.publish(last, subject=subject)
    followed = [line.log async for response in following for line in response.lines]
    assert followed == ["hi\n", "bye\n"]  # ends at the allocation's closing batch


async def _drained(call: grpc.aio.UnaryStreamCall) -> None:  # type: ignore[type-arg]
    async for _ in call:
        pass


async def test_the_http_routes(
    web: httpx.AsyncClient, store: EventStore, gateway: Gateway, users: Users
) -> None:
    alice = {"authorization": f"Bearer {users.alice_token}"}
    mallory = {"authorization": f"Bearer {users.mallory_token}"}
    answer = await web.post(
        "/api/v1/tasks",
        json={"taskType": "COMMAND", "command": ["echo", "hi"], "configYaml": "debug: true"},
        headers=alice,
    )
    assert answer.status_code == 200, answer.text
    shown = answer.json()["task"]
    assert (shown["taskType"], shown["state"], shown["owner"], shown["command"], shown["exitCode"]) == (
        "COMMAND",
        "STATE_PENDING",
        "alice",
        ["echo", "hi"],
        None,
    )
    assert shown["config"]["debug"] is True and answer.json()["warnings"] == []
    task_id = shown["id"]
    listed = (await web.get("/api/v1/tasks?task_type=COMMAND", headers=mallory)).json()["tasks"]
    assert task_id in [t["id"] for t in listed]
    assert (await web.get(f"/api/v1/tasks/{task_id}", headers=mallory)).json()["task"]["id"] == task_id
    assert (await web.post(f"/api/v1/tasks/{task_id}/kill", headers=mallory)).status_code == 403
    assert (await web.get(f"/api/v1/tasks/{task_id}/logs", headers=mallory)).status_code == 403
    killed = await web.post(f"/api/v1/tasks/{task_id}/kill", headers=alice)
    assert killed.json() == {"unchangedReason": ""}
    task = api_pb2.Task(id=task_id, allocation_id=f"{task_id}.1")
    await append(
        store,
        gateway,
        task,
        events_pb2.AllocationCanceled(allocation_id=task.allocation_id, reason="killed"),
        "canceled",
    )
    logs = await web.get(f"/api/v1/tasks/{task_id}/logs?follow=true", headers=alice)
    assert (logs.status_code, logs.text) == (200, "")  # ended with no output: the stream ends
    ended = (await web.get("/api/v1/tasks?include_terminated=true", headers=alice)).json()["tasks"]
    assert [t["state"] for t in ended if t["id"] == task_id] == ["STATE_TERMINATED"]

    assert (await web.get(f"/api/v1/tasks/{uuid.uuid4()}", headers=alice)).status_code == 404
    assert (await web.get("/api/v1/tasks/not-a-task", headers=alice)).status_code == 400
    assert (await web.get("/api/v1/tasks")).status_code == 401
    bad = await web.post("/api/v1/tasks", json={"taskType": "COMMAND", "command": "echo hi"}, headers=alice)
    assert (bad.status_code, "command must be a list of strings" in bad.text) == (400, True)
    big = await web.post(
        "/api/v1/tasks", content=b'{"configYaml": "' + b"x" * 3 * 2**20 + b'"}', headers=alice
    )
    assert (big.status_code, "the request body is over" in big.text) == (400, True)


@asynccontextmanager
async def scheduler(gateway: Gateway, ready_file: Path) -> AsyncIterator[None]:
    """The scheduler service, caught up: it publishes the job queue the gateway shows."""
    settings = SchedulerSettings(
        nats_url=gateway.settings.nats_url, namespace=gateway.settings.namespace, ready_file=ready_file
    )
    task = asyncio.create_task(run_scheduler(settings))
    try:
        while not ready_file.exists():
            assert not task.done(), task
            await asyncio.sleep(0.02)
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_tasks_job_is_listed_and_its_priority_changed(
    stub: api_pb2_grpc.DeterminedStub, store: EventStore, gateway: Gateway, users: Users, tmp_path: Path
) -> None:
    task = (await launch(stub, users.alice, config_yaml="description: prioritized")).task
    job_id = f"task/{task.id}"
    async with scheduler(gateway, tmp_path / "ready"):
        [job] = [
            j
            for j in (await stub.GetJobs(api_pb2.GetJobsRequest(), metadata=users.mallory)).jobs
            if j.job_id == job_id
        ]
        assert (job.type, job.name, job.owner, job.priority, job.slots_needed) == (
            "TASK",
            "prioritized",
            "alice",
            42,
            1,
        )
        change = api_pb2.UpdateJobRequest(job_id=job_id, priority=5)
        code, message = await code_of(stub.UpdateJob(change, metadata=users.mallory))
        assert code == grpc.StatusCode.PERMISSION_DENIED and "may change its job" in message
        assert (await stub.UpdateJob(change, metadata=users.alice)).unchanged_reason == ""
        assert (
            await stub.GetTask(api_pb2.GetTaskRequest(task_id=task.id), metadata=users.alice)
        ).task.priority == 5
        again = await stub.UpdateJob(change, metadata=users.alice)
        assert again.unchanged_reason == f"Job {job_id} has these values already: nothing to change"
        [job] = [
            j
            for j in (await stub.GetJobs(api_pb2.GetJobsRequest(), metadata=users.alice)).jobs
            if j.job_id == job_id
        ]
        assert job.priority == 5
        capped = api_pb2.UpdateJobRequest(job_id=job_id, max_slots=1)
        code, message = await code_of(stub.UpdateJob(capped, metadata=users.alice))
        assert (code, message) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            "max_slots is for experiments' jobs: a task has one allocation",
        )
    [changed] = [
        e.job_resources_changed
        for e in await stored(store, "allocation")
        if e.job_resources_changed.job_id == job_id
    ]
    assert (changed.priority, changed.owner) == (5, "alice")
    await exit_(store, gateway, task, 0)
    code, message = await code_of(stub.UpdateJob(change, metadata=users.alice))
    assert (code, message) == (grpc.StatusCode.NOT_FOUND, f"job {job_id} not found: the task is TERMINATED")
    unknown = api_pb2.UpdateJobRequest(job_id=f"task/{uuid.uuid4()}", priority=5)
    assert (await code_of(stub.UpdateJob(unknown, metadata=users.alice)))[0] == grpc.StatusCode.NOT_FOUND
