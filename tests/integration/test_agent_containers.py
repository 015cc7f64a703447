"""The agent's Docker runtime against a real dockerd, nats-server and
PostgreSQL: a Core API script in a stock image without the harness, the
config's variables and bind mounts, a missing image, a stop's grace then
kill, and an agent that restarts and reattaches its container.

The stock image is DET_TEST_IMAGE, else one of STOCK_IMAGES (a Debian
bookworm with python3 and nothing of ours); the tests skip, saying why, when
no daemon answers or it has none of them."""

import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest
from test_services_flow import (
    ES,
    TS,
    config,
    create_experiment,
    experiment_ended,
    payloads,
    trial_logs,
    wait_for,
)

from deploy.local.servers import free_port
from determined.common.context import pack_context
from determined.proto import events_pb2 as ev
from services.agent.__main__ import AgentSettings
from services.agent.__main__ import run as run_agent
from services.agent.containers.runtime import DockerRuntime, remove_trial_containers
from services.agent.containers.spec import (
    AGENT_LABEL,
    ALLOCATION_LABEL,
    TASK_LABEL,
    TRIAL_LABEL,
    WORK_DIR_LABEL,
    ContainerSpec,
)
from services.common.envelope import Append
from services.common.eventstore import EventStore
from services.gateway.server import Gateway
from services.gateway.settings import GatewaySettings
from services.scheduler.__main__ import SchedulerSettings
from services.scheduler.__main__ import run as run_scheduler
from services.searcher.__main__ import SearcherSettings
from services.searcher.__main__ import run as run_searcher

# Stock Debian images with python3 (3.11) and nothing of ours: deploy/docker/make-base-image.sh's,
# or one made by hand (`debootstrap --variant=minbase --include=python3 bookworm` + `docker import`).
STOCK_IMAGES = ("python:3.11-slim-bookworm", "det-test-base:bookworm")


def _stock_image() -> str:
    """DET_TEST_IMAGE, else the first of STOCK_IMAGES the daemon has (else the first)."""
    if os.environ.get("DET_TEST_IMAGE"):
        return os.environ["DET_TEST_IMAGE"]
    with (
        contextlib.suppress(docker.errors.DockerException, OSError),
        contextlib.closing(docker.from_env()) as client,
    ):
        for name in STOCK_IMAGES:
            with contextlib.suppress(docker.errors.ImageNotFound):
                client.images.get(name)
                return name
    return STOCK_IMAGES[0]


IMAGE = _stock_image()
SECRET = "test-secret"

pytestmark = pytest.mark.docker


def _daemon() -> docker.DockerClient | None:
    try:
        client = docker.from_env()
        client.ping()
        client.images.get(IMAGE)
        return client
    except (docker.errors.DockerException, OSError):
        return None


@pytest.fixture(scope="module")
def client() -> Iterator[docker.DockerClient]:
    found = _daemon()
    if found is None:
        pytest.skip(
            f"no Docker daemon answers, or it has no image {IMAGE} (deploy/docker/make-base-image.sh makes it)"
        )
    yield found
    found.close()


@pytest.fixture
def settings(nats_url: str, namespace: str) -> dict[str, object]:
    return {"nats_url": nats_url, "namespace": namespace, "cluster_secret": SECRET, "cluster_id": "c"}


def agent_settings(settings: dict[str, object], work: Path, **more: object) -> AgentSettings:
    return AgentSettings(
        **settings,
        agent_id=f"agent-{settings['namespace']}",
        agent_work_dir=work,
        agent_kill_grace_s=1,
        agent_runtime="docker",
        agent_default_image=IMAGE,
        **more,
    )


@contextlib.asynccontextmanager
async def cluster(
    settings: dict[str, object], work: Path, *, in_process_agent: bool = True, **agent: object
) -> AsyncIterator[dict[str, Any]]:
    """Searcher, scheduler (patient with a silent agent) and, unless told not to, the agent."""
    tasks: dict[str, Any] = {
        "searcher": asyncio.create_task(run_searcher(SearcherSettings(**settings))),
        "scheduler": asyncio.create_task(run_scheduler(SchedulerSettings(**settings, agent_lost_s=120))),
    }
    if in_process_agent:
        tasks["agent"] = asyncio.create_task(run_agent(agent_settings(settings, work, **agent)))
    try:
        yield tasks
    finally:
        for task in tasks.values():
            task.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)
        with contextlib.suppress(docker.errors.DockerException):  # the daemon unreachable on purpose
            for left in containers_of(docker.from_env(), settings):  # an agent that stops leaves them
                left.remove(force=True)


def containers_of(client: docker.DockerClient, settings: dict[str, object]) -> list[Any]:
    label = f"{AGENT_LABEL}=agent-{settings['namespace']}"
    return list(client.containers.list(all=True, filters={"label": label}))


async def lines_of(store: EventStore, trial_id: int = 1, allocations: int = 1) -> list[ev.LogLine]:
    return [line for b in await trial_logs(store, trial_id, allocations) for line in b.lines]


async def test_a_core_api_script_runs_in_a_stock_image_without_the_harness(
    event_store: EventStore, settings: dict[str, object], database_url: str, tmp_path: Path, client: Any
) -> None:
    context = tmp_path / "context"
    context.mkdir()
    (context / "train.py").write_text(
        "import os, determined as det\n"
        "with det.core.init() as core:\n"
        "    for step in (1, 2):\n"
        "        core.train.report_training_metrics(steps_completed=step, metrics={'loss': 1.0 / step})\n"
        "    core.train.report_validation_metrics(steps_completed=2, metrics={'loss': 0.25})\n"
        "print('harness from', os.path.dirname(det.__file__), 'as', os.getuid())\n"
    )
    digest = await event_store.contexts.put(pack_context(context))
    checkpoints = tmp_path / "checkpoints"
    checkpoints.mkdir(mode=0o777)
    checkpoints.chmod(0o777)  # the trial runs as nobody
    storage = {"type": "shared_fs", "host_path": str(checkpoints)}
    gateway = await Gateway.start(
        GatewaySettings(
            **settings,
            database_url=database_url,
            gateway_port=free_port(),
            gateway_host="127.0.0.1",
            grace_period_s=0.1,
            allow_anonymous=True,
            allow_blank_password=True,
        )
    )
    try:
        async with cluster(settings, tmp_path / "work", master_address=f"127.0.0.1:{gateway.port}"):
            await create_experiment(
                event_store, 1, config("python3 train.py", max_restarts=0, checkpoint_storage=storage), digest
            )
            envelopes = await wait_for(event_store, experiment_ended)
    finally:
        await gateway.stop()
    lines = [line.log for line in await lines_of(event_store)]
    assert [c.state for c in payloads(envelopes, ev.ExperimentStateChanged)] == [
        ES.EXPERIMENT_STATE_COMPLETED
    ], "\n".join(lines)
    reported = payloads(envelopes, ev.TrialMetricsReported)
    points = sorted((r.group, r.steps_completed) for batch in reported for r in batch.reports)
    assert points == [("training", 1), ("training", 2)]
    assert [v.steps_completed for v in payloads(envelopes, ev.TrialValidationReported)] == [2]
    assert "harness from /opt/determined-es/harness/determined as 65534" in lines
    assert not containers_of(client, settings)  # removed once its logs were shipped


async def test_variables_and_a_read_only_bind_mount_reach_the_trial(
    event_store: EventStore, settings: dict[str, object], tmp_path: Path, client: Any
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "in.txt").write_text("the data\n")
    script = 'cat /data/in.txt; echo "$GREETING"; touch /data/new 2>/dev/null || echo write refused'
    cfg = config(
        ["sh", "-c", script],
        max_restarts=0,
        environment={"environment_variables": ["GREETING=hello from the config"]},
        bind_mounts=[{"host_path": str(data), "container_path": "/data", "read_only": True}],
    )
    async with cluster(settings, tmp_path / "work"):
        await create_experiment(event_store, 1, cfg)
        envelopes = await wait_for(event_store, experiment_ended)
    assert [line.log for line in await lines_of(event_store)] == [
        "the data",
        "hello from the config",
        "write refused",
    ]
    assert [c.state for c in payloads(envelopes, ev.ExperimentStateChanged)] == [
        ES.EXPERIMENT_STATE_COMPLETED
    ]
    assert not (data / "new").exists()


async def test_a_mount_of_the_docker_socket_is_refused_naming_the_key(
    event_store: EventStore, settings: dict[str, object], tmp_path: Path, client: Any
) -> None:
    cfg = config(
        "true",
        max_restarts=0,
        bind_mounts=[{"host_path": "/var/run", "container_path": "/host-run"}],
    )
    async with cluster(settings, tmp_path / "work"):
        await create_experiment(event_store, 1, cfg)
        envelopes = await wait_for(event_store, experiment_ended)
    [exited] = payloads(envelopes, ev.AllocationExited)
    assert "bind_mounts[0].host_path" in exited.error and "docker.sock" in exited.error
    assert not containers_of(client, settings)


async def test_a_missing_image_ends_the_allocation_at_once_naming_it(
    event_store: EventStore, settings: dict[str, object], tmp_path: Path, client: Any
) -> None:
    image = "det-no-such-image/anywhere:1"
    cfg = config("true", max_restarts=0, environment={"image": image})
    async with cluster(settings, tmp_path / "work"):
        await create_experiment(event_store, 1, cfg)
        envelopes = await wait_for(event_store, experiment_ended)
    [exited] = payloads(envelopes, ev.AllocationExited)
    assert f"cannot pull image {image}" in exited.error
    assert [t.state for t in payloads(envelopes, ev.TrialEnded)] == [TS.TRIAL_STATE_ERROR]
    assert any(image in line.log for line in await lines_of(event_store))


async def test_a_kill_is_a_grace_period_then_sigkill_and_the_container_is_labelled(
    event_store: EventStore, settings: dict[str, object], tmp_path: Path, client: Any
) -> None:
    script = "trap 'echo got TERM' TERM; echo up; while true; do sleep 0.05; done"
    async with cluster(settings, tmp_path / "work"):
        await create_experiment(event_store, 1, config(["sh", "-c", script]))
        await wait_for(event_store, lambda es: bool(payloads(es, ev.AllocationStarted)))
        [container] = containers_of(client, settings)
        labels = container.labels
        assert (labels[ALLOCATION_LABEL], labels[TRIAL_LABEL], labels[AGENT_LABEL]) == (
            "1.1",
            "1",
            f"agent-{settings['namespace']}",
        )
        assert labels[TASK_LABEL]
        await wait_until_logged(event_store, "up")  # its trap is set
        kill = Append("experiment/1", ev.ExperimentKillRequested(experiment_id=1), "kill-1")
        await event_store.append(kill, actor="user:determined")
        envelopes = await wait_for(event_store, experiment_ended)
    [exited] = payloads(envelopes, ev.AllocationExited)
    assert exited.killed and exited.exit_code == 137  # SIGKILL, after the trap kept it alive
    logs = [line.log for line in await lines_of(event_store)]
    assert logs[0] == "up" and "got TERM" in logs
    assert not containers_of(client, settings)


async def test_a_restarted_agent_reattaches_an_open_allocation_and_removes_closed_ones(
    event_store: EventStore, settings: dict[str, object], tmp_path: Path, client: Any
) -> None:
    work = tmp_path / "work"
    go = work / "1.1" / "trial" / "go"  # the trial's folder, mounted inside at the same path
    script = 'for i in 1 2 3; do echo "step $i"; done; while [ ! -f go ]; do sleep 0.05; done; echo "step 4"'
    closed = client.containers.create(
        IMAGE,
        ["sleep", "60"],
        labels={AGENT_LABEL: f"agent-{settings['namespace']}", ALLOCATION_LABEL: "9.1"},
    )
    async with cluster(settings, work, in_process_agent=False):
        first = agent_process(settings, work)
        try:
            await create_experiment(event_store, 1, config(["sh", "-c", script], max_restarts=0))
            await wait_until_logged(event_store, "step 3")
        finally:
            first.kill()  # SIGKILL: nothing of the agent runs on, its container does
            first.wait()
        go.touch()
        second = agent_process(settings, work)
        try:
            envelopes = await wait_for(event_store, experiment_ended)
        finally:
            second.terminate()
            second.wait()
    assert [(x.exit_code, x.error) for x in payloads(envelopes, ev.AllocationExited)] == [(0, "")]
    assert [line.log for line in await lines_of(event_store)] == ["step 1", "step 2", "step 3", "step 4"]
    assert len(payloads(envelopes, ev.AgentRegistered)) == 2
    with pytest.raises(docker.errors.NotFound):
        closed.reload()
    assert not containers_of(client, settings)


def agent_process(settings: dict[str, object], work: Path) -> subprocess.Popen[bytes]:
    """`python -m services.agent` with the settings `agent_settings` gives."""
    given = agent_settings(settings, work)
    env = {
        **os.environ,
        "DET_NATS_URL": given.nats_url,
        "DET_NAMESPACE": given.namespace,
        "DET_CLUSTER_SECRET": given.cluster_secret,
        "DET_CLUSTER_ID": given.cluster_id,
        "DET_AGENT_ID": given.agent_id,
        "DET_AGENT_WORK_DIR": str(work),
        "DET_AGENT_RUNTIME": "docker",
        "DET_AGENT_DEFAULT_IMAGE": IMAGE,
    }
    return subprocess.Popen([sys.executable, "-m", "services.agent"], env=env, stdout=subprocess.DEVNULL)


async def wait_until_logged(store: EventStore, text: str, trial_id: int = 1) -> None:
    async with asyncio.timeout(30):
        while text not in [
            line.log
            async for stored in store.logs.read(trial_id, follow=False)
            for line in stored.batch.lines
        ]:
            await asyncio.sleep(0.05)


async def test_an_unreachable_daemon_ends_the_allocation_at_once_naming_the_image(
    event_store: EventStore, settings: dict[str, object], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-daemon.sock")
    async with cluster(settings, tmp_path / "work"):
        await create_experiment(event_store, 1, config("true", max_restarts=0))
        envelopes = await wait_for(event_store, experiment_ended)
    [exited] = payloads(envelopes, ev.AllocationExited)
    assert exited.error.startswith(f"cannot run image {IMAGE}: cannot reach the Docker daemon: ")
    assert any(exited.error in line.log for line in await lines_of(event_store))


async def test_output_after_a_silence_longer_than_the_clients_timeout_is_all_there(client: Any) -> None:
    """docker-py lifts its timeout on log streams; were one cut, it is followed again from its last line."""
    runtime = DockerRuntime(lambda: docker.from_env(timeout=1))  # a read timeout after 1 s of silence
    spec = ContainerSpec(
        IMAGE,
        ("sh", "-c", "echo a; echo b; sleep 1.5; echo c >&2; echo d"),
        {},
        "/",
        "65534:65534",
        {AGENT_LABEL: "agent-timeout-test", ALLOCATION_LABEL: "1.1"},
        network_mode="none",
    )
    process = await runtime.start(spec)
    try:
        assert process.stdout is not None and process.stderr is not None
        out, err, code = await asyncio.gather(process.stdout.read(), process.stderr.read(), process.wait())
    finally:
        await process.remove()
    assert code == 0
    assert [line.split(" ", 1)[1] for line in out.decode().splitlines()] == ["a", "b", "d"]
    assert [line.split(" ", 1)[1] for line in err.decode().splitlines()] == ["c"]


def test_cluster_down_removes_the_trial_containers_of_its_agents_only(
    client: docker.DockerClient, tmp_path: Path
) -> None:
    """Agents leave their containers running when they stop; cluster-down removes
    those of its own agents' work dirs, not another cluster's agent of the same name."""
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    started = [
        client.containers.run(
            IMAGE, ["sleep", "300"], detach=True, labels={AGENT_LABEL: "vm", WORK_DIR_LABEL: str(work_dir)}
        )
        for work_dir in (ours, theirs)
    ]
    try:
        assert remove_trial_containers([ours]) == 1
        left = client.containers.list(all=True, filters={"label": f"{AGENT_LABEL}=vm"})
        assert started[1].id in {c.id for c in left} and started[0].id not in {c.id for c in left}
    finally:
        for container in started:
            with contextlib.suppress(docker.errors.NotFound):
                container.remove(force=True)
