"""run/cluster.json: what restart_service needs from it, and its refusals."""

import json
from pathlib import Path

import pytest

from deploy.local.cluster import ClusterOptions, ClusterRecord, DeployError, restart_service


def test_a_record_keeps_the_options_a_restarted_service_needs(tmp_path: Path) -> None:
    options = ClusterOptions(tmp_path, 18080, 14222, 15433, cpu_slots=3, gpu=False, json_logs=True,
                             agent_id="a1")
    record = ClusterRecord.of(options)
    record.pids["gateway"] = 123
    record.save(tmp_path)
    loaded = ClusterRecord.load(tmp_path)
    assert loaded == record
    assert loaded is not None and loaded.options(tmp_path) == options


def test_a_cluster_json_from_before_the_options_loads_with_their_defaults(tmp_path: Path) -> None:
    path = ClusterRecord.path(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"master_port": 1, "nats_port": 2, "postgres_port": 3, "pids": {"agent": 4}}))
    loaded = ClusterRecord.load(tmp_path)
    assert loaded is not None
    assert loaded.options(tmp_path) == ClusterOptions(tmp_path, 1, 2, 3)
    assert loaded.pids == {"agent": 4}


def test_restart_service_refuses_an_unknown_service(tmp_path: Path) -> None:
    with pytest.raises(DeployError, match="no service is called 'postgres'"):
        restart_service(tmp_path, "postgres")


def test_restart_service_refuses_when_no_cluster_runs(tmp_path: Path) -> None:
    with pytest.raises(DeployError, match="no cluster is running"):
        restart_service(tmp_path, "gateway")
    ClusterRecord(1, 2, 3, pids={"gateway": 2**22 + 12345}).save(tmp_path)  # a pid that is gone
    with pytest.raises(DeployError, match="no cluster is running"):
        restart_service(tmp_path, "gateway")
