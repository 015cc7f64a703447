"""A nats-server of a test's own (not the session's), to kill and start
again on the same store and port: for the outage tests."""

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.local.servers import NatsServer, free_port


class OwnNats:
    def __init__(self, folder: Path) -> None:
        self.server = NatsServer(folder / "store", free_port(), folder / "nats-server.log")
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return self.server.url

    def start(self) -> None:
        self.process = self.server.start()

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait()
        self.process = None


@pytest.fixture
def own_nats(tmp_path: Path) -> Iterator[OwnNats]:
    nats_server = OwnNats(tmp_path / "nats")
    nats_server.start()
    yield nats_server
    if nats_server.process is not None:
        nats_server.kill()
