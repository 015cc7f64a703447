"""`python -m services.gateway` as a process: ready file, SIGTERM, a taken port."""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from deploy.local.servers import free_port


def gateway_env(nats_url: str, namespace: str, database_url: str, port: int, ready: Path) -> dict[str, str]:
    return {
        **os.environ,
        "DET_NATS_URL": nats_url,
        "DET_NAMESPACE": namespace,
        "DET_DATABASE_URL": database_url,
        "DET_GATEWAY_PORT": str(port),
        "DET_READY_FILE": str(ready),
        "DET_GRACE_PERIOD_S": "0.5",
        "DET_ALLOW_ANONYMOUS": "true",
        "DET_ALLOW_BLANK_PASSWORD": "1",
    }


def start(env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "services.gateway"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_ready_then_sigterm_stops_cleanly(
    nats_url: str, namespace: str, database_url: str, tmp_path: Path
) -> None:
    ready = tmp_path / "ready"
    process = start(gateway_env(nats_url, namespace, database_url, free_port(), ready))
    try:
        deadline = time.monotonic() + 20
        while not ready.exists():
            assert process.poll() is None, process.communicate()[0]
            assert time.monotonic() < deadline, "the gateway never wrote its ready file"
            time.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        assert process.wait(20) == 0
    finally:
        process.kill()
        process.wait()


def test_a_taken_port_is_named(nats_url: str, namespace: str, database_url: str, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        process = start(gateway_env(nats_url, namespace, database_url, port, tmp_path / "ready"))
        output, _ = process.communicate(timeout=30)
    assert process.returncode == 1
    assert f"port {port}" in output
