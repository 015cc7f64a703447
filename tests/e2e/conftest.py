"""One local cluster for the whole end-to-end session (`det deploy local
cluster-up` on free ports, a data folder under /tmp), shared by every test that
asks for `cluster`; tests that need none (local test mode) never start it."""

from collections.abc import Iterator

import pytest
from support.e2e_cluster import Cluster, started_cluster


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    with started_cluster("det-e2e") as running:
        yield running
