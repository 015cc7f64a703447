"""The Docker runtime's shell: containers made, watched, signalled and
removed with the `docker` library (blocking calls: run in threads; those
that last as long as the container in daemon threads of their own, so an
agent that goes away is not held by them).

A `ContainerProcess` gives a container the surface of a trial process
(`runner.TrialProcess`): its output as two streams of lines, each line led
by the daemon's timestamp (`logs.LogShipper.follow(..., timestamped=True)`
reads it), and its exit code. A stream cut short while the container runs
(the daemon's read timeout, a daemon restart) is followed again from the
last line read; a restarted agent follows a container it reattaches from the
last line it shipped (`since_ns`).
"""

import asyncio
import contextlib
import hashlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import docker
import docker.errors
import docker.types
import requests.exceptions
import structlog

from services.agent.containers.spec import AGENT_LABEL, ALLOCATION_LABEL, WORK_DIR_LABEL, ContainerSpec
from services.agent.launch import AgentError
from services.agent.logs import MAX_LINE_BYTES, timestamp_ns

FOLLOW_RETRY_S = 0.5
DOCKER_ERRORS = (docker.errors.DockerException, requests.exceptions.RequestException)

log = structlog.get_logger()


class ContainerError(AgentError):
    """The container could not be had (image, registry, daemon): the daemon's words."""


class ContainerProcess:
    """One running container, seen as a trial process."""

    def __init__(
        self, client: docker.DockerClient, container: Any, *, since_ns: Mapping[str, int] | None = None
    ) -> None:
        loop = asyncio.get_running_loop()
        self.client = client
        self.container = container
        self.pid = int(container.attrs.get("State", {}).get("Pid") or 0)
        self.returncode: int | None = None
        self.stdout: asyncio.StreamReader | None = asyncio.StreamReader(limit=MAX_LINE_BYTES, loop=loop)
        self.stderr: asyncio.StreamReader | None = asyncio.StreamReader(limit=MAX_LINE_BYTES, loop=loop)
        self._ended: asyncio.Future[int] = loop.create_future()
        self._streams: list[Any] = []
        self._abandoned = False
        since = since_ns or {}
        for name, reader in (("stdout", self.stdout), ("stderr", self.stderr)):
            _daemon(self._follow, loop, reader, name, since.get(name, 0))
        _daemon(self._wait, loop)

    @property
    def allocation_id(self) -> str:
        return str(self.container.labels.get(ALLOCATION_LABEL, ""))

    async def wait(self) -> int:
        return await asyncio.shield(self._ended)

    def send_signal(self, signum: int) -> None:
        """Signals the container's process (its init passes it on); a gone container is no error."""
        _daemon(self._signal, signum)

    def abandon(self) -> None:
        """The agent is going away: stops following the container (it runs on)."""
        self._abandoned = True
        for stream in list(self._streams):
            with contextlib.suppress(Exception):
                stream.close()

    async def remove(self) -> None:
        """Removes the container (its output was shipped)."""
        await asyncio.to_thread(remove, self.container)

    def _signal(self, signum: int) -> None:
        with contextlib.suppress(*DOCKER_ERRORS):
            self.container.kill(signal=int(signum))

    def _wait(self, loop: asyncio.AbstractEventLoop) -> None:
        while not self._abandoned:
            try:
                code = int(self.container.wait(timeout=None)["StatusCode"])
                break
            except DOCKER_ERRORS as error:  # the daemon went away: asked again once it is back
                log.warning("container_wait_failed", container=self.container.id[:12], error=str(error))
                time.sleep(FOLLOW_RETRY_S)
        else:
            return
        _call(loop, self._exited, code)

    def _exited(self, code: int) -> None:
        self.returncode = code
        if not self._ended.done():
            self._ended.set_result(code)

    def _follow(
        self, loop: asyncio.AbstractEventLoop, reader: asyncio.StreamReader, name: str, since_ns: int
    ) -> None:
        """Feeds the stream's lines (led by their timestamps) past `since_ns`, until its end."""
        last = since_ns
        try:
            while not self._abandoned:
                try:
                    for line, stamp in _lines(self._stream(name, last)):
                        if stamp > last:
                            last = stamp
                            if not _call(loop, reader.feed_data, line):
                                return
                    if self.returncode is not None or not self._running():
                        return
                except DOCKER_ERRORS as error:
                    if self._abandoned or self._gone():
                        return
                    log.info(
                        "container_logs_followed_again", container=self.container.id[:12], error=str(error)
                    )
                time.sleep(FOLLOW_RETRY_S)
        finally:
            _call(loop, reader.feed_eof)

    def _stream(self, name: str, since_ns: int) -> Iterator[bytes]:
        # Whole seconds (a float would round): the lines before since_ns are skipped by the caller.
        since = since_ns // 1_000_000_000 or None
        stream = self.client.api.logs(
            self.container.id,
            stdout=name == "stdout",
            stderr=name == "stderr",
            stream=True,
            follow=True,
            timestamps=True,
            since=since,
        )
        self._streams.append(stream)
        try:
            yield from stream
        finally:
            self._streams.remove(stream)

    def _running(self) -> bool:
        try:
            self.container.reload()
        except DOCKER_ERRORS:
            return not self._gone()
        return bool(self.container.attrs.get("State", {}).get("Running"))

    def _gone(self) -> bool:
        try:
            self.client.containers.get(self.container.id)
        except docker.errors.NotFound:
            return True
        except DOCKER_ERRORS:
            return False
        return False


def _stamp(line: bytes) -> int:
    return timestamp_ns(line.split(b" ", 1)[0].decode(errors="replace"))


def _lines(chunks: Iterator[bytes]) -> Iterator[tuple[bytes, int]]:
    """Whole lines ("<timestamp> <text>\\n", the timestamp kept) and their timestamps (ns)."""
    pending = b""
    for chunk in chunks:
        pending += chunk
        *complete, pending = pending.split(b"\n")
        for line in complete:
            yield line + b"\n", _stamp(line)
    if pending:
        yield pending + b"\n", _stamp(pending)


class DockerRuntime:
    """The agent's access to its Docker daemon (`docker.from_env()`)."""

    def __init__(self, connect: Callable[[], docker.DockerClient] = docker.from_env) -> None:
        self._connect = connect
        self._client: docker.DockerClient | None = None

    def client(self) -> docker.DockerClient:
        if self._client is None:
            try:
                self._client = self._connect()
            except DOCKER_ERRORS as error:
                raise ContainerError(f"cannot reach the Docker daemon: {error}") from None
        return self._client

    async def start(self, spec: ContainerSpec) -> ContainerProcess:
        """Pulls the image when asked or missing, creates and starts the container.
        ContainerError: the image, the registry or the daemon said no (their words)."""
        container = await asyncio.to_thread(self._create, spec)
        return ContainerProcess(self.client(), container)

    def attach(self, container: Any, since_ns: Mapping[str, int]) -> ContainerProcess:
        """Follows a container an earlier run of the agent started (call in the event loop)."""
        return ContainerProcess(self.client(), container, since_ns=since_ns)

    def containers_of(self, agent_id: str, work_dir: str) -> list[Any]:
        """The containers of the agent `agent_id` working in `work_dir`, running or not (blocking)."""
        wanted = [f"{AGENT_LABEL}={agent_id}", f"{WORK_DIR_LABEL}={work_dir}"]
        return list(self.client().containers.list(all=True, filters={"label": wanted}))

    def _create(self, spec: ContainerSpec) -> Any:
        try:
            client = self.client()
        except ContainerError as error:
            raise ContainerError(f"cannot run image {spec.image}: {error}") from None
        try:
            self._ensure_image(client, spec)
            container = client.containers.create(**create_arguments(spec))
        except DOCKER_ERRORS as error:
            raise ContainerError(
                f"cannot create a container of image {spec.image}: {_words(error)}"
            ) from None
        try:
            container.start()
            container.reload()
        except DOCKER_ERRORS as error:
            remove(container)
            raise ContainerError(f"cannot start a container of image {spec.image}: {_words(error)}") from None
        return container

    def _ensure_image(self, client: docker.DockerClient, spec: ContainerSpec) -> None:
        if not spec.force_pull:
            try:
                client.images.get(spec.image)
                return
            except docker.errors.ImageNotFound:
                pass
        repository, tag = _repository_and_tag(spec.image)
        try:
            client.images.pull(repository, tag=tag, auth_config=dict(spec.registry_auth) or None)
        except DOCKER_ERRORS as error:
            raise ContainerError(f"cannot pull image {spec.image}: {_words(error)}") from None


def create_arguments(spec: ContainerSpec) -> dict[str, Any]:
    """The `containers.create` arguments of a spec."""
    requests_ = (
        [docker.types.DeviceRequest(driver="nvidia", device_ids=list(spec.gpu_uuids), capabilities=[["gpu"]])]
        if spec.gpu_uuids
        else []
    )
    return {
        "image": spec.image,
        "command": list(spec.argv),
        "environment": dict(spec.env),
        "working_dir": spec.working_dir,
        "user": spec.user,
        "labels": dict(spec.labels),
        "name": container_name(spec.labels),
        "mounts": [
            docker.types.Mount(
                m.container_path, m.host_path, type="bind", read_only=m.read_only, propagation=m.propagation
            )
            for m in spec.mounts
        ],
        "devices": [f"{d.host_path}:{d.container_path}:{d.mode}" for d in spec.devices],
        "cap_add": list(spec.cap_add),
        "cap_drop": list(spec.cap_drop),
        "shm_size": spec.shm_size,
        "device_requests": requests_,
        "network_mode": spec.network_mode,
        "security_opt": list(spec.security_opt),
        "privileged": False,
        "init": True,
        "stdin_open": False,
        "tty": False,
        "detach": True,
    }


def remove(container: Any) -> None:
    """Removes a container, running or not (blocking); one already gone is no error."""
    with contextlib.suppress(docker.errors.NotFound):
        try:
            container.remove(force=True)
        except DOCKER_ERRORS as error:
            log.warning("container_not_removed", container=container.id[:12], error=_words(error))


def _repository_and_tag(image: str) -> tuple[str, str | None]:
    """What `images.pull` takes: a digest stays whole; no tag is "latest"."""
    if "@" in image:
        return image, None
    if ":" in image.rpartition("/")[2]:
        repository, _, tag = image.rpartition(":")
        return repository, tag
    return image, "latest"


def _words(error: BaseException) -> str:
    """The daemon's own words, where it gave some."""
    explanation = getattr(error, "explanation", None)
    return str(explanation or error)


def _call(loop: asyncio.AbstractEventLoop, callback: Callable[..., None], *args: Any) -> bool:
    """Runs `callback` in the loop's thread; False: the loop is gone (the agent ended)."""
    try:
        loop.call_soon_threadsafe(callback, *args)
    except RuntimeError:
        return False
    return True


def _daemon(target: Callable[..., None], *args: Any) -> None:
    threading.Thread(target=target, args=args, daemon=True).start()


def container_name(labels: Mapping[str, str]) -> str:
    """`det-<agent>-<work dir's digest>-<allocation>`: unique on the host, as
    two clusters' agents may share a name and their allocations' ids."""
    work_dir = hashlib.sha256(labels.get(WORK_DIR_LABEL, "").encode()).hexdigest()[:8]
    return f"det-{labels.get(AGENT_LABEL, '')}-{work_dir}-{labels.get(ALLOCATION_LABEL, '')}"


def remove_trial_containers(work_dirs: Sequence[Path]) -> int:
    """Removes the trial containers of the agents that worked in `work_dirs`
    (cluster-down: an agent that stops leaves them running, for its next run
    to reattach). How many were removed; 0 when no Docker daemon answers."""
    try:
        client = docker.from_env()
        found = [
            container
            for work_dir in work_dirs
            for container in client.containers.list(
                all=True, filters={"label": f"{WORK_DIR_LABEL}={work_dir}"}
            )
        ]
        for container in found:
            with contextlib.suppress(docker.errors.NotFound):
                container.remove(force=True)
    except docker.errors.DockerException:
        return 0
    return len(found)
