"""The compose cluster's keeper: starts again a part whose container was killed.

Docker's restart policy brings back a container whose process crashed, but not one that
`docker kill` stopped (the daemon counts that as stopped by hand). The keeper follows the
daemon's events for its project's containers and, KEEP_AFTER_S after a container died,
starts it again unless it runs already (the restart policy's work), is gone, or was
stopped (`docker stop`, `compose down`, `compose stop`: a `stop` event follows the death).

    python3 -m deploy.compose.part keeper       (DET_COMPOSE_PROJECT names the project)
"""

import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import docker

# Long enough for a `stop` event to follow the death it caused.
KEEP_AFTER_S = 2.0


def should_start(died_at: float, stopped_at: float | None, status: str) -> bool:
    """Whether a part's container that died at `died_at` (and got a `stop` event at
    `stopped_at`, None: none since) is to be started: it is not running and nobody
    stopped it."""
    stopped = stopped_at is not None and stopped_at >= died_at
    return status in ("exited", "dead") and not stopped


def keep(project: str, ready: Callable[[], None]) -> None:
    """Follows the daemon's events for ever; calls `ready` once it does."""
    import docker

    client = docker.from_env()
    stopped: dict[str, float] = {}
    events = client.events(
        decode=True, filters={"type": "container", "label": f"com.docker.compose.project={project}"}
    )
    ready()
    for event in events:
        container_id, action = event.get("id", ""), event.get("Action", "")
        if action == "stop":
            stopped[container_id] = time.time()
        elif action == "die" and container_id:
            died_at = time.time()
            threading.Timer(KEEP_AFTER_S, _keep_one, (client, container_id, died_at, stopped)).start()


def _keep_one(
    client: "docker.DockerClient", container_id: str, died_at: float, stopped: dict[str, float]
) -> None:
    import docker.errors

    try:
        container = client.containers.get(container_id)
        if should_start(died_at, stopped.get(container_id), container.status):
            print(f"starting {container.name} again: it was killed", flush=True)
            container.start()
    except docker.errors.APIError as failure:  # removed meanwhile, or the daemon refused
        print(f"could not start {container_id[:12]} again: {failure}", flush=True)


def project_name() -> str:
    return os.environ["DET_COMPOSE_PROJECT"]
