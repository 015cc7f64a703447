"""The compose cluster end to end: `det deploy local cluster-up --docker` (deploy/compose/)
runs the README's first experiment to COMPLETED; `docker kill` of the scheduler's container
while the trial runs changes nothing the user sees (the keeper starts it again, and every
metric is stored once); cluster-down --docker, then up again, keeps the experiment.

Needs a Docker daemon and the cluster image (`det deploy local build-images`, which .ci/run
runs; built here when missing)."""

import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from support.e2e_cluster import Cluster, created_id, det, wait_for

if TYPE_CHECKING:
    from deploy.local.status import PartStatus

pytestmark = [pytest.mark.e2e, pytest.mark.docker]

FIRST_EXPERIMENT = Path(__file__).parents[2] / "examples" / "first_experiment"
# Holds the trial in RUNNING long enough to kill the scheduler under it.
STARTUP_HOOK = "sleep 8\n"


def docker_client() -> "object":
    docker = pytest.importorskip("docker")
    try:
        client = docker.from_env(timeout=600)
        client.ping()
    except Exception as failure:  # any way of not answering: no socket, refused, no permission
        pytest.skip(f"no Docker daemon answers ({failure}); start dockerd to run the compose tests")
    return client


@pytest.fixture(scope="module")
def cluster_image() -> str:
    import docker.errors

    from deploy.docker import images

    client = docker_client()
    name = images.image_name("cluster")
    try:
        client.images.get(name)  # type: ignore[attr-defined]
    except docker.errors.ImageNotFound:
        images.build_images(images.default_work_dir(), ("cluster",))
    return name


@pytest.fixture(scope="module")
def compose_cluster(tmp_path_factory: pytest.TempPathFactory, cluster_image: str) -> Iterator[Cluster]:
    from deploy.compose import cluster as compose

    cluster = Cluster(tmp_path_factory.mktemp("compose") / "data", ("--docker",))
    try:
        started = cluster.up()
        assert started.returncode == 0, started.stdout + started.stderr
        assert "Cluster is up: master at localhost" in started.stdout
        assert "You are logged in as admin" in started.stdout
        yield cluster
    finally:
        if compose.is_compose_cluster(cluster.data_dir):
            compose.compose(cluster.data_dir, "down", "--volumes", "--remove-orphans")


def container(cluster: Cluster, part: str) -> "object":
    from deploy.compose import cluster as compose

    return compose.containers(cluster.data_dir)[part]


def test_first_experiment_completes_through_a_scheduler_kill(
    compose_cluster: Cluster, tmp_path: Path
) -> None:
    context = tmp_path / "first_experiment"
    shutil.copytree(FIRST_EXPERIMENT, context)
    (context / "startup-hook.sh").write_text(STARTUP_HOOK)
    experiment_id = created_id(
        compose_cluster.det("experiment", "create", str(context / "const.yaml"), str(context)).stdout
    )
    trial = wait_for(
        lambda: next((t for t in compose_cluster.trials(experiment_id) if t["state"] == "RUNNING"), None),
        "the trial to run",
    )
    started_at = _scheduler(compose_cluster).started_at
    container(compose_cluster, "scheduler").kill()  # type: ignore[attr-defined]
    wait_for(
        lambda: (part := _scheduler(compose_cluster)).state == "running" and part.started_at > started_at,
        "the keeper to start the scheduler again",
    )

    state = wait_for(
        lambda: (s := compose_cluster.experiment_state(experiment_id)) in ("COMPLETED", "ERROR") and s,
        "the experiment to end",
        deadline_s=180.0,
    )
    assert state == "COMPLETED", compose_cluster.logs(trial["id"])
    assert "done: y = " in compose_cluster.logs(trial["id"])
    events = compose_cluster.metric_events(trial["id"])
    reported = Counter((r.group, r.steps_completed) for event in events for r in event.reports)
    assert reported == Counter(("training", step) for step in range(1, 101))  # each step once

    _down_and_up(compose_cluster)
    assert compose_cluster.experiment_state(experiment_id) == "COMPLETED"


def _scheduler(cluster: Cluster) -> "PartStatus":
    from deploy.compose import cluster as compose

    return compose.cluster_status(cluster.data_dir).part("scheduler")


def _down_and_up(cluster: Cluster) -> None:
    stopped = det(
        cluster.env, "deploy", "local", "cluster-down", "--docker", "--data-dir", str(cluster.data_dir)
    )
    assert stopped.returncode == 0 and "Cluster stopped" in stopped.stdout, stopped.stderr
    started = cluster.up()
    assert started.returncode == 0, started.stdout + started.stderr


def test_status_shows_every_part_of_the_compose_cluster(compose_cluster: Cluster) -> None:
    shown = compose_cluster.det("deploy", "local", "status", "--data-dir", str(compose_cluster.data_dir))
    assert "Docker Compose project det-" in shown.stdout
    rows = [[cell.strip() for cell in line.split("|")] for line in shown.stdout.splitlines()]
    states: dict[str, str] = {}
    for row in rows:  # the parts' table, then the agents'
        if len(row) > 2:
            states.setdefault(row[0], row[1])
    for part in (
        "nats-server",
        "postgres",
        "gateway",
        "scheduler",
        "searcher",
        "checkpoint",
        "agent",
        "keeper",
    ):
        assert states[part] == "running", shown.stdout
