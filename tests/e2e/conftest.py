"""One local cluster for the whole end-to-end session (`det deploy local
cluster-up` on free ports, a data folder under /tmp), shared by every test that
asks for `cluster`; tests that need none (local test mode) never start it."""

from collections.abc import Iterator

import pytest
from support.e2e_cluster import Cluster, started_cluster

# A detached run's trial ends ERROR this long after its script's last heartbeat
# (test_detached_runs.py; the default is 5 minutes).
DETACHED_TIMEOUT_S = 10


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DET_UNMANAGED_TIMEOUT_S", str(DETACHED_TIMEOUT_S))
        with started_cluster("det-e2e") as running:
            yield running
