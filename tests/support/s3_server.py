"""A real S3-compatible HTTP server for tests and benchmarks: moto's standalone server,
started as a process of its own on a free port (never a patched client). It keeps
everything in memory and accepts any access key.

    with running_s3_server() as s3:
        section = s3.storage()          # a checkpoint_storage section on a new bucket
        boto3_client = s3.client()
"""

import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploy.local.servers import free_port

START_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class S3Server:
    endpoint_url: str
    access_key: str = "testing"
    secret_key: str = "testing"

    def client(self) -> Any:
        """A boto3 S3 client of this server."""
        import boto3

        return boto3.session.Session().client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name="us-east-1",
        )

    def make_bucket(self, name: str | None = None) -> str:
        """Create a bucket (a new unique name unless `name` is given) and return its name."""
        bucket = name or f"test-{uuid.uuid4().hex[:16]}"
        self.client().create_bucket(Bucket=bucket)
        return bucket

    def storage(self, bucket: str | None = None, prefix: str | None = None) -> dict[str, Any]:
        """A `checkpoint_storage` section for `bucket` (a new one when None) on this server."""
        return {
            "type": "s3",
            "bucket": bucket or self.make_bucket(),
            "prefix": prefix,
            "endpoint_url": self.endpoint_url,
            "access_key": self.access_key,
            "secret_key": self.secret_key,
        }

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        """Every key under `prefix` in `bucket`, sorted."""
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return sorted(item["Key"] for page in pages for item in page.get("Contents", []))


@contextmanager
def running_s3_server() -> Iterator[S3Server]:
    """moto's server on 127.0.0.1 and a free port, stopped (its data gone) on exit."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="det-test-s3-") as folder:
        log_path = Path(folder) / "moto.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            server = S3Server(f"http://127.0.0.1:{port}")
            _wait_until_up(server, process, log_path)
            yield server
        finally:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


def _wait_until_up(server: S3Server, process: "subprocess.Popen[bytes]", log_path: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"moto's S3 server exited ({process.returncode}):\n{log_path.read_text()[-2000:]}"
            )
        try:
            with urllib.request.urlopen(server.endpoint_url, timeout=1):
                return
        except urllib.error.HTTPError:
            return  # it answers (an error page is an answer)
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(
        f"moto's S3 server did not answer within {START_TIMEOUT_S:.0f} s:\n{log_path.read_text()[-2000:]}"
    )
