"""`det deploy local verify` runs the read models' check (services/gateway/verify.py)
with the settings and credentials of the cluster's gateway, and only on a running cluster."""

import os
from pathlib import Path

import pytest

from deploy.local.cluster import DATABASE, ClusterRecord, DeployError
from deploy.local.control import gateway_environment
from deploy.local.credentials import credentials


def test_it_runs_with_the_gateways_settings_and_credentials(tmp_path: Path) -> None:
    ClusterRecord(18080, 14222, 15433, supervisor_pid=os.getpid()).save(tmp_path)
    environment = gateway_environment(tmp_path)
    found = credentials(tmp_path)
    assert environment["DET_DATABASE_URL"] == found.database_url(15433, DATABASE)
    assert (environment["DET_NATS_USER"], environment["DET_NATS_PASSWORD"]) == (
        "gateway",
        found.nats["gateway"].password,
    )
    assert (environment["DET_NATS_URL"], environment["DET_NAMESPACE"]) == ("nats://127.0.0.1:14222", "det")


def test_it_refuses_a_folder_where_no_cluster_runs(tmp_path: Path) -> None:
    with pytest.raises(DeployError, match="no cluster is running"):
        gateway_environment(tmp_path)
