"""`det deploy local cluster-up --docker`, `cluster-down --docker` and `status` of a cluster
run by Docker Compose from deploy/compose/docker-compose.yml, with the process cluster's
settings (deploy/local/cluster.py makes both) and credentials (deploy/local/credentials.py).

    <data dir>/compose/
        compose.env    the compose file's variables: image, ports, folders, user (no secret)
        cluster.json   the options cluster-up was given (a ClusterRecord, no pids)
        secrets/       (0700) <part>.json (0600): that part's settings and credentials,
                       mounted read-only at /run/determined/part.json in its container only;
                       nats-server.conf (the users' bcrypt hashes)
        tls/           the certificate the master serves (with --tls-cert), for every part
        tls-key/       (0700) its key, for nats-server and the gateway only

The project is named after the data folder (`det-<hash>`), so that two clusters on one
machine keep their containers and volumes apart; the volumes outlive cluster-down.
"""

import hashlib
import json
import os
import subprocess
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from deploy.local import initial_password
from deploy.local.cluster import (
    ClusterOptions,
    ClusterRecord,
    DeployError,
    agent_environment,
    agent_work_dir,
    cluster_identity,
    container_settings,
    default_checkpoints,
    part_credentials,
    recorded_cluster_id,
    service_environment,
)
from deploy.local.credentials import authorization_config, credentials, write_private
from deploy.local.servers import NatsServer
from deploy.local.status import ClusterStatus, PartStatus
from deploy.local.tls import nats_tls
from deploy.local.trial_home import make_work_dir, prepare_folders

if TYPE_CHECKING:
    import docker.models.containers

    from deploy.local.control import ClusterReport

COMPOSE_FILE = Path(__file__).with_name("docker-compose.yml")
SERVICES = ("gateway", "scheduler", "searcher", "checkpoint")
PARTS = ("nats-server", "postgres", *SERVICES, "agent", "keeper")
# Where the cluster image keeps NATS's store (the `nats` volume), and where the compose file
# mounts each part's files (part.json, tls/, tls-key/).
NATS_HOME = Path("/var/lib/determined-es/nats")
CONTAINER_FILES = Path("/run/determined")
# The cluster image's user: PostgreSQL's in a cluster started by root, which it refuses.
IMAGE_UID = 1000
# The cluster image's trial user (cluster.Dockerfile): trials run as it in a cluster started by
# root, and it owns the default checkpoint storage.
TRIAL_USER = "determined-trial"
TRIAL_UID = 1001
# The whole of cluster-up --docker: compose up, then every part healthy.
UP_DEADLINE_S = 300.0
POLL_S = 0.5
LAST_ERROR_LINES = 10
RUNTIMES = ("docker", "process")


def folder(data_dir: Path) -> Path:
    return data_dir / "compose"


def project(data_dir: Path) -> str:
    return "det-" + hashlib.sha256(str(data_dir).encode()).hexdigest()[:10]


def is_compose_cluster(data_dir: Path) -> bool:
    """Whether cluster-up --docker set up the cluster in `data_dir`."""
    return (folder(data_dir) / "cluster.json").exists()


def compose_command() -> list[str]:
    """`docker compose` where the plugin exists, else Debian's `docker-compose`."""
    for command in (["docker", "compose"], ["docker-compose"]):
        try:
            if subprocess.run([*command, "version"], capture_output=True, check=False).returncode == 0:
                return command
        except OSError:
            continue
    raise DeployError(
        "neither `docker compose` nor `docker-compose` is installed (Debian: apt install docker-compose)"
    )


def compose(
    data_dir: Path, *arguments: str, timeout_s: float | None = None
) -> subprocess.CompletedProcess[str]:
    """Runs compose on this cluster's project; DeployError with compose's words when it fails
    or outlasts `timeout_s`."""
    here = folder(data_dir)
    command = [
        *compose_command(),
        "--project-name",
        project(data_dir),
        "--file",
        str(COMPOSE_FILE),
        "--env-file",
        str(here / "compose.env"),
        *arguments,
    ]
    try:
        result = subprocess.run(
            command, capture_output=True, text=True, check=False, cwd=here, timeout=timeout_s
        )
    except subprocess.TimeoutExpired as error:
        said = (error.stderr or b"")[-3000:]
        text = said.decode(errors="replace") if isinstance(said, bytes) else said
        raise DeployError(
            f"{' '.join(command[:2])} {' '.join(arguments)} did not end in {timeout_s:.0f} s:\n{text}"
        ) from None
    if result.returncode != 0:
        raise DeployError(f"{' '.join(command[:2])} {' '.join(arguments)} failed:\n{result.stderr[-3000:]}")
    return result


def cluster_up(options: ClusterOptions, image: str, runtime: str = "docker") -> ClusterRecord:
    """Writes the compose cluster's files, brings it up and returns once every part is
    healthy; DeployError naming the part that is not, with the end of its log."""
    require_image(image)
    data_dir = options.data_dir
    data_dir.mkdir(parents=True, exist_ok=True)
    cluster_identity(data_dir)
    record = ClusterRecord.of(options)
    write_files(options, image, runtime)
    (folder(data_dir) / "cluster.json").write_text(json.dumps(asdict(record), indent=2))
    started = time.monotonic()
    compose(data_dir, "up", "--detach", "--remove-orphans", timeout_s=UP_DEADLINE_S)
    wait_healthy(data_dir, UP_DEADLINE_S - (time.monotonic() - started))
    return record


def require_image(image: str) -> None:
    """DeployError unless the daemon answers and has `image`."""
    import docker
    import docker.errors

    try:
        docker.from_env().images.get(image)
    except docker.errors.ImageNotFound:
        raise DeployError(
            f"the image {image} is not on this machine: build it with det deploy local build-images"
        ) from None
    except docker.errors.DockerException as failure:
        raise DeployError(f"no Docker daemon answers: {failure}") from None


def cluster_down(data_dir: Path) -> bool:
    """Stops and removes the containers (the volumes stay); False when none was set up here."""
    if not is_compose_cluster(data_dir):
        return False
    compose(data_dir, "down", "--remove-orphans")
    from services.agent.containers.runtime import remove_trial_containers  # docker: only here

    remove_trial_containers([agent_work_dir(data_dir, "agent")])  # the agent leaves them running
    return True


def load_record(data_dir: Path) -> ClusterRecord:
    path = folder(data_dir) / "cluster.json"
    if not path.exists():
        raise DeployError(f"no compose cluster was started from {data_dir}")
    return ClusterRecord(**json.loads(path.read_text()))


def write_files(options: ClusterOptions, image: str, runtime: str) -> None:
    """compose.env, secrets/ and tls/ of the cluster in options.data_dir."""
    data_dir = options.data_dir
    secrets = folder(data_dir) / "secrets"
    secrets.mkdir(parents=True, exist_ok=True, mode=0o700)
    inside = tls_files(options)
    for part, settings in part_settings(options, runtime).items():
        mapped = {key: _replaced(value, inside) for key, value in settings.items()}
        write_private(secrets / f"{part}.json", json.dumps(mapped))
    write_private(secrets / "nats-server.conf", _replaced(nats_config(options), inside))
    variables = compose_variables(options, image)
    if os.geteuid() == 0:  # PostgreSQL runs as the image's user
        os.chown(secrets / "postgres.json", IMAGE_UID, IMAGE_UID)
    (folder(data_dir) / "compose.env").write_text(
        "".join(f"{key}={value}\n" for key, value in variables.items())
    )


def tls_files(options: ClusterOptions) -> dict[str, str]:
    """Copies the certificate the master serves into tls/ (mounted read-only into every part
    that dials the master or NATS) and its key into tls-key/ (into nats-server's and the
    gateway's only); returns each host path -> its path in a container."""
    if not options.tls_cert:
        return {}
    inside = {}
    for source, name in ((options.tls_cert, "tls"), (options.tls_key, "tls-key")):
        copy = folder(options.data_dir) / name / Path(source).name
        copy.parent.mkdir(mode=0o700, exist_ok=True)
        write_private(copy, Path(source).read_text())
        inside[source] = str(CONTAINER_FILES / name / copy.name)
    return inside


def _replaced(text: str, paths: dict[str, str]) -> str:
    for host, inside in sorted(paths.items(), key=lambda pair: -len(pair[0])):  # longest first
        text = text.replace(host, inside)
    return text


def part_settings(options: ClusterOptions, runtime: str) -> dict[str, dict[str, str]]:
    """Each part's file: the process cluster's settings for it (only DET_ ones: nothing of
    the caller's environment) and its own credentials."""
    data_dir = options.data_dir
    found = credentials(data_dir, [_agent_id(options)])
    nats_url = f"nats://127.0.0.1:{options.nats_port}"
    base = {
        key: value
        for key, value in service_environment(options, data_dir, nats_url).items()
        if key.startswith("DET_") and key != "DET_STATUS_FILE"
    }
    base["PYTHONUNBUFFERED"] = "1"
    settings = {
        "nats-server": {"DET_NATS_PORT": str(options.nats_port)},
        "postgres": {
            "DET_POSTGRES_PORT": str(options.postgres_port),
            "DET_POSTGRES_PASSWORD": found.postgres_password,
            "DET_GATEWAY_DB_PASSWORD": found.gateway_password,
        },
    }
    for part in SERVICES:
        settings[part] = dict(base, **part_credentials(part, data_dir, options.postgres_port))
    settings["gateway"].update(initial_password.gateway_environment(data_dir))
    agent = ClusterRecord.of(options).agent_specs()[0]
    work_dir = agent_work_dir(data_dir, agent.part)
    make_work_dir(work_dir, data_dir, recorded_cluster_id(data_dir))
    login = part_credentials(agent.part, data_dir, options.postgres_port, agent.agent_id)
    settings["agent"] = dict(
        agent_environment(dict(base, **login), agent, data_dir, "127.0.0.1"),
        DET_AGENT_RUNTIME=runtime,
        DET_AGENT_TRIAL_USER=TRIAL_USER if os.geteuid() == 0 else "",
        # The host's daemon cannot see the agent container's harness: the trial image has its own.
        DET_AGENT_HARNESS_MOUNTS="false",
        **(container_settings(data_dir, options.settings) if runtime == "docker" else {}),
    )
    return settings


def _agent_id(options: ClusterOptions) -> str:
    return ClusterRecord.of(options).agent_specs()[0].agent_id


def nats_config(options: ClusterOptions) -> str:
    """nats-server's configuration in its container: its store in the `nats` volume."""
    found = credentials(options.data_dir, [_agent_id(options)])
    listen = "0.0.0.0" if options.advertise_host else "127.0.0.1"
    server = NatsServer(
        NATS_HOME,
        options.nats_port,
        NATS_HOME / "nats-server.log",
        listen,
        authorization=authorization_config(found.nats),
        tls=nats_tls(options.tls_cert, options.tls_key, listen),
    )
    return server.config_text()


def compose_variables(options: ClusterOptions, image: str) -> dict[str, str]:
    """compose.env: what the compose file names; no credentials."""
    data_dir = options.data_dir
    checkpoints = default_checkpoints(data_dir, options.settings)
    prepare_folders(data_dir, recorded_cluster_id(data_dir), checkpoints, "")
    root = os.geteuid() == 0
    if root:  # the trial user's, as in the process cluster, by its uid in the image
        os.chown(checkpoints, TRIAL_UID, TRIAL_UID)
        checkpoints.chmod(0o700)
    socket = docker_socket()
    for name in ("tls", "tls-key"):  # empty without TLS
        (folder(data_dir) / name).mkdir(mode=0o700, exist_ok=True)
    return {
        "DET_PROJECT": project(data_dir),
        "DET_CLUSTER_IMAGE": image,
        "DET_UID": str(os.geteuid()),
        "DET_GID": str(os.getegid()),
        "DET_POSTGRES_UID": str(IMAGE_UID if root else os.geteuid()),
        "DET_POSTGRES_GID": str(IMAGE_UID if root else os.getegid()),
        "DET_SECRETS": str(folder(data_dir) / "secrets"),
        "DET_TLS_FOLDER": str(folder(data_dir) / "tls"),
        "DET_TLS_KEY_FOLDER": str(folder(data_dir) / "tls-key"),
        "DET_CHECKPOINTS": str(checkpoints),
        "DET_AGENT_WORK_DIR": str(agent_work_dir(data_dir, "agent")),
        "DET_DOCKER_SOCKET": str(socket),
        "DET_DOCKER_GID": str(socket.stat().st_gid) if socket.exists() else "0",
    }


def docker_socket() -> Path:
    """The daemon's socket on this machine ($DOCKER_HOST when it is a unix one)."""
    host = os.environ.get("DOCKER_HOST", "")
    return Path(host.removeprefix("unix://")) if host.startswith("unix://") else Path("/var/run/docker.sock")


def containers(data_dir: Path) -> dict[str, "docker.models.containers.Container"]:
    """This cluster's containers by part."""
    import docker

    client = docker.from_env()
    found = client.containers.list(
        all=True, filters={"label": f"com.docker.compose.project={project(data_dir)}"}
    )
    return {container.labels.get("com.docker.compose.service", ""): container for container in found}


def wait_healthy(data_dir: Path, deadline_s: float) -> None:
    end = time.monotonic() + deadline_s
    while True:
        status = cluster_status(data_dir)
        waiting = [part for part in status.parts if part.state != "running"]
        if not waiting:
            return
        if time.monotonic() > end:
            part = waiting[0]
            raise DeployError(
                f"{part.name} is not healthy ({part.state}) after {UP_DEADLINE_S:.0f} s:\n{part.last_error}"
            )
        time.sleep(POLL_S)


def cluster_status(data_dir: Path) -> ClusterStatus:
    """Every part as `det deploy local status` shows it: its container's state (running once
    healthy), host pid, restarts, start and, unless running, the end of its log."""
    found = containers(data_dir)
    return ClusterStatus(0, time.time(), tuple(part_status(part, found.get(part)) for part in PARTS))


def part_status(part: str, container: "docker.models.containers.Container | None") -> PartStatus:
    if container is None:
        return PartStatus(part, "absent", 0, 0, "", 0.0, 0)
    container.reload()
    state = container.attrs["State"]
    health = state.get("Health", {}).get("Status", "")
    shown = {"healthy": "running", "starting": "starting", "unhealthy": "unhealthy"}.get(
        health, state["Status"]
    )
    if state["Status"] != "running":
        shown = state["Status"]
    error = "" if shown == "running" else container.logs(tail=LAST_ERROR_LINES).decode(errors="replace")
    return PartStatus(
        part,
        shown,
        int(state.get("Pid") or 0),
        int(container.attrs.get("RestartCount", 0)),
        error,
        _started(state),
        0,
    )


def _started(state: dict[str, str]) -> float:
    from datetime import datetime

    text = state.get("StartedAt", "")
    try:
        return datetime.fromisoformat(text[:26].rstrip("Z") + "+00:00").timestamp()
    except ValueError:
        return 0.0


def cluster_report(data_dir: Path) -> "ClusterReport":
    """What `det deploy local status` shows of the compose cluster in `data_dir`."""
    from deploy.local.control import ClusterReport
    from deploy.local.status import event_reports

    return ClusterReport(
        data_dir,
        load_record(data_dir),
        cluster_status(data_dir),
        True,
        event_reports(data_dir),
        project(data_dir),
    )


def logs_hint(data_dir: Path) -> str:
    """Where its logs are, for people."""
    return (
        f"logs: docker-compose --project-name {project(data_dir)} --file {COMPOSE_FILE} "
        f"--env-file {folder(data_dir) / 'compose.env'} logs PART"
    )
