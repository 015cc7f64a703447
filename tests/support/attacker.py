"""The attacker of the security tests that run on a local cluster: the
non-admin user mallory, with a CLI login of her own. A module shares these
fixtures by naming them (`mallory = attacker.mallory`); they use its
`cluster` fixture."""

import copy
import uuid

import pytest

from support.e2e_cluster import Cluster, det


@pytest.fixture(scope="module")
def mallory_password() -> str:
    return f"M-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="module")
def mallory(cluster: Cluster, mallory_password: str, tmp_path_factory: pytest.TempPathFactory) -> Cluster:
    """The cluster as the non-admin mallory sees it (her own CLI config)."""
    cluster.det("user", "create", "mallory", "--password", mallory_password)
    her = copy.copy(cluster)
    her.env = dict(cluster.env, DET_CONFIG_DIR=str(tmp_path_factory.mktemp("mallory-cli")))
    logged = det(her.env, "user", "login", "mallory", stdin=f"{mallory_password}\n")
    assert logged.returncode == 0, logged.stdout + logged.stderr
    return her
