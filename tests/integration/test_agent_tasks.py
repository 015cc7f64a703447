"""Notebooks and commands on a real nats-server, scheduler and agent (one
cluster for the module): the task requests are appended as the gateway
appends them; what the agent makes of them is read back from the log."""

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import docker
import httpx
import pytest
from test_agent_containers import IMAGE, client
from test_services_flow import DEADLINE_S, payloads

from determined.common.context import pack_context
from determined.proto import events_pb2 as ev
from services.agent.__main__ import AgentSettings
from services.agent.__main__ import run as run_agent
from services.common.envelope import Append, Envelope
from services.common.eventstore import EventStore
from services.common.tokens import task_proxy_token
from services.scheduler.__main__ import SchedulerSettings
from services.scheduler.__main__ import run as run_scheduler

SECRET = "test-secret"
__all__ = ["client"]  # the Docker tests' fixture (test_agent_containers.py): skips without a daemon


@contextlib.asynccontextmanager
async def running_cluster(nats_url: str, work_dir: Path, **agent: object) -> AsyncIterator[EventStore]:
    """A scheduler and an agent of 2 CPU slots (with more agent settings if
    given), and the log they share."""
    settings: dict[str, object] = {
        "nats_url": nats_url,
        "namespace": f"t{uuid.uuid4().hex[:10]}",
        "cluster_secret": SECRET,
    }
    agent_settings = AgentSettings(
        **settings,  # type: ignore[arg-type]
        agent_id=f"agent-{settings['namespace']}",
        agent_work_dir=work_dir,
        agent_cpu_slots=2,
        agent_gpus=False,
        agent_kill_grace_s=5,
        **agent,  # type: ignore[arg-type]
    )
    parts = [
        asyncio.create_task(run_scheduler(SchedulerSettings(**settings))),  # type: ignore[arg-type]
        asyncio.create_task(run_agent(agent_settings)),
    ]
    event_store = await EventStore.connect(nats_url, str(settings["namespace"]))
    try:
        yield event_store
    finally:
        await event_store.close()
        for part in parts:
            part.cancel()
        await asyncio.gather(*parts, return_exceptions=True)


@pytest.fixture(scope="module")
async def store(nats_url: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[EventStore]:
    """The module's cluster: its agent runs tasks as processes."""
    async with running_cluster(nats_url, tmp_path_factory.mktemp("agent-tasks")) as event_store:
        yield event_store


@pytest.fixture(scope="module")
async def docker_store(
    nats_url: str, tmp_path_factory: pytest.TempPathFactory, client: docker.DockerClient
) -> AsyncIterator[EventStore]:
    """A cluster whose agent runs tasks as containers of the stock image."""
    work_dir = tmp_path_factory.mktemp("agent-tasks-docker")
    async with running_cluster(
        nats_url, work_dir, agent_runtime="docker", agent_default_image=IMAGE
    ) as event_store:
        yield event_store


async def launch(
    store: EventStore, task_type: str, config: dict[str, object] | None = None, **launch: object
) -> str:
    """Appends a task's request as the gateway does; returns its task id."""
    task_id = str(uuid.uuid4())
    requested = ev.AllocationRequested(
        allocation_id=f"{task_id}.1",
        task_id=task_id,
        task_type=task_type,
        slots=1,
        job_id=f"task/{task_id}",
        weight=1.0,
        preemptible=False,
        owner="alice",
        task=ev.TaskLaunch(config_json=json.dumps(config or {}), **launch),  # type: ignore[arg-type]
    )
    append = Append(f"allocation/{task_id}.1", requested, f"task-launched-{task_id}")
    await store.append(append, actor="user:alice")
    return task_id


async def kill(store: EventStore, task_id: str) -> None:
    asked = ev.AllocationKillRequested(
        allocation_id=f"{task_id}.1", task_id=task_id, reason="killed by alice"
    )
    await store.append(Append(f"allocation/{task_id}.1", asked, f"kill-{task_id}"), actor="user:alice")


async def events_of(
    store: EventStore, task_id: str, done: Callable[[list[Envelope]], bool]
) -> list[Envelope]:
    """The task's allocation events once `done` holds of them (a bound, not a speed check)."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        envelopes = [
            stored.envelope
            async for stored in store.read(["allocation"], follow=False)
            if stored.envelope.aggregate == f"allocation/{task_id}.1"
        ]
        if done(envelopes):
            return envelopes
        assert time.monotonic() < deadline, f"timed out: {[e.WhichOneof('payload') for e in envelopes]}"
        await asyncio.sleep(0.1)


def ended(envelopes: list[Envelope]) -> bool:
    return bool(payloads(envelopes, ev.AllocationExited))


async def task_logs(store: EventStore, task_type: str, task_id: str) -> list[ev.LogBatch]:
    """The task's log batches, once the last is in (polled, as trial logs are)."""
    subject = store.logs.task_subject(task_type, task_id)
    deadline = time.monotonic() + DEADLINE_S
    while True:
        reading = store.reader.read(store.logs.stream, [subject], 1, False)
        batches = [ev.LogBatch.FromString(data) async for _, data, _, _ in reading]
        if any(b.allocation_ended for b in batches):
            return batches
        assert time.monotonic() < deadline, f"timed out waiting for the logs; got {batches}"
        await asyncio.sleep(0.1)


def lines(batches: list[ev.LogBatch]) -> list[str]:
    return [line.log for batch in batches for line in batch.lines]


async def test_a_command_runs_in_a_shell_and_exits_with_its_code(store: EventStore) -> None:
    task_id = await launch(store, "COMMAND", command=["echo hi;", "exit", "3"])
    envelopes = await events_of(store, task_id, ended)
    [exited] = payloads(envelopes, ev.AllocationExited)
    assert (exited.exit_code, exited.killed, exited.task_id) == (3, False, task_id)
    assert payloads(envelopes, ev.AllocationReady) == []  # a command serves nothing
    batches = await task_logs(store, "COMMAND", task_id)
    assert lines(batches) == ["hi"] and batches[-1].allocation_ended


async def test_a_command_that_does_not_exist_ends_with_the_shells_error(store: EventStore) -> None:
    task_id = await launch(store, "COMMAND", command=["no-such-program-x"])
    [exited] = payloads(await events_of(store, task_id, ended), ev.AllocationExited)
    assert exited.exit_code == 127
    assert any("no-such-program-x" in line for line in lines(await task_logs(store, "COMMAND", task_id)))


async def test_a_killed_command_ends_killed(store: EventStore) -> None:
    task_id = await launch(store, "COMMAND", command=["echo started; sleep 600"])
    await events_of(store, task_id, lambda es: bool(payloads(es, ev.AllocationStarted)))
    await kill(store, task_id)
    [exited] = payloads(await events_of(store, task_id, ended), ev.AllocationExited)
    assert exited.killed


async def test_a_notebook_answers_behind_its_token_until_killed(store: EventStore) -> None:
    task_id = await launch(store, "NOTEBOOK")
    envelopes = await events_of(
        store, task_id, lambda es: bool(payloads(es, ev.AllocationReady) or ended(es))
    )
    [ready] = payloads(envelopes, ev.AllocationReady)
    assert ready.proxy_address.startswith("127.0.0.1:") and ready.agent_id.startswith("agent-")
    status_url = f"http://{ready.proxy_address}/proxy/{task_id}/api/status"
    token = task_proxy_token(SECRET, task_id)
    async with httpx.AsyncClient(timeout=30, trust_env=False) as client:
        assert (await client.get(status_url)).status_code == 403  # no token: no notebook
        answer = await client.get(status_url, headers={"Authorization": f"token {token}"})
    assert answer.status_code == 200 and answer.json()["kernels"] == 0
    await kill(store, task_id)
    [exited] = payloads(await events_of(store, task_id, ended), ev.AllocationExited)
    assert exited.killed


async def test_an_idle_notebook_is_stopped_past_its_idle_timeout(store: EventStore) -> None:
    task_id = await launch(store, "NOTEBOOK", {"idle_timeout": "2s"})
    envelopes = await events_of(store, task_id, ended)
    [ready] = payloads(envelopes, ev.AllocationReady)
    [asked] = payloads(envelopes, ev.AllocationKillRequested)
    assert asked.reason == "idle_timeout: no activity for 2s" and asked.agent_id == ready.agent_id
    [exited] = payloads(envelopes, ev.AllocationExited)
    assert exited.killed


async def test_a_notebook_that_dies_before_it_answers_ends_with_its_exit(
    store: EventStore, tmp_path: Path
) -> None:
    """Its context shadows JupyterLab with a module that fails at once."""
    (tmp_path / "jupyterlab").mkdir()
    (tmp_path / "jupyterlab" / "__init__.py").write_text("")
    (tmp_path / "jupyterlab" / "__main__.py").write_text("print('jupyter is broken'); raise SystemExit(7)\n")
    digest = await store.contexts.put(pack_context(tmp_path))
    task_id = await launch(store, "NOTEBOOK", context_hash=digest)
    envelopes = await events_of(store, task_id, ended)
    [exited] = payloads(envelopes, ev.AllocationExited)
    assert exited.exit_code == 7 and payloads(envelopes, ev.AllocationReady) == []
    assert lines(await task_logs(store, "NOTEBOOK", task_id))[-1] == "jupyter is broken"


@pytest.mark.docker
async def test_a_command_runs_in_its_container_as_an_unprivileged_user(docker_store: EventStore) -> None:
    task_id = await launch(docker_store, "COMMAND", command=["echo hi from $(id -u); exit 3"])
    [exited] = payloads(await events_of(docker_store, task_id, ended), ev.AllocationExited)
    assert exited.exit_code == 3
    assert lines(await task_logs(docker_store, "COMMAND", task_id)) == ["hi from 65534"]


@pytest.mark.docker
async def test_a_notebook_in_an_image_without_jupyterlab_says_so(docker_store: EventStore) -> None:
    task_id = await launch(docker_store, "NOTEBOOK")
    [exited] = payloads(await events_of(docker_store, task_id, ended), ev.AllocationExited)
    assert exited.exit_code == 1
    [line] = lines(await task_logs(docker_store, "NOTEBOOK", task_id))
    assert "JupyterLab is not installed" in line and "use an image that has it" in line
