"""One local cluster for the whole end-to-end session (`det deploy local
cluster-up` on free ports, a data folder under /tmp), shared by every test that
asks for `cluster`; tests that need none (local test mode) never start it."""

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_cluster import Cluster


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    # Not under the home folder: PostgreSQL runs as its own user and must reach it.
    data_dir = Path("/tmp") / f"det-e2e-{uuid.uuid4().hex[:8]}"
    running = Cluster(data_dir)
    started = running.up()
    assert started.returncode == 0, started.stdout + started.stderr
    yield running
    running.down()
    shutil.rmtree(data_dir, ignore_errors=True)
