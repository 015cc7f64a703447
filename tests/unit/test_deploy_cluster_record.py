"""run/cluster.json: what the supervisor needs from it, and the refusals of
the commands that act on one part."""

import json
from pathlib import Path

import pytest

from deploy.local.cluster import ClusterOptions, ClusterRecord, DeployError
from deploy.local.control import restart_part, start_part, stop_part


def test_a_record_keeps_the_options_a_restarted_service_needs(tmp_path: Path) -> None:
    options = ClusterOptions(
        tmp_path, 18080, 14222, 15433, cpu_slots=3, gpu=False, json_logs=True, agent_id="a1"
    )
    record = ClusterRecord.of(options)
    record.pids["gateway"] = 123
    record.start_ticks["gateway"] = 456
    record.supervisor_pid = 7
    record.postgres_data_dir = "/var/lib/determined-es/x/postgres"
    record.save(tmp_path)
    loaded = ClusterRecord.load(tmp_path)
    assert loaded == record
    assert loaded is not None and loaded.options(tmp_path) == options
    assert loaded.postgres_folder(tmp_path) == Path("/var/lib/determined-es/x/postgres")


def test_a_cluster_json_from_before_the_options_loads_with_their_defaults(tmp_path: Path) -> None:
    path = ClusterRecord.path(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"master_port": 1, "nats_port": 2, "postgres_port": 3, "pids": {"agent": 4}}))
    loaded = ClusterRecord.load(tmp_path)
    assert loaded is not None
    assert loaded.options(tmp_path) == ClusterOptions(tmp_path, 1, 2, 3)
    assert loaded.pids == {"agent": 4}
    assert (loaded.supervisor_pid, loaded.start_ticks) == (0, {})
    assert loaded.postgres_folder(tmp_path) == tmp_path / "postgres"


@pytest.mark.parametrize("change", [restart_part, stop_part, start_part])
def test_a_part_change_refuses_an_unknown_part(tmp_path: Path, change: object) -> None:
    with pytest.raises(
        DeployError, match="no part is called 'postgress'; the parts are: nats-server, postgres"
    ):
        change(tmp_path, "postgress")  # type: ignore[operator]


def test_a_part_change_refuses_when_no_cluster_runs(tmp_path: Path) -> None:
    with pytest.raises(DeployError, match="no cluster is running"):
        restart_part(tmp_path, "gateway")
    ClusterRecord(1, 2, 3, pids={"gateway": 2**22 + 12345}, supervisor_pid=2**22 + 12346).save(tmp_path)
    with pytest.raises(DeployError, match="no cluster is running .*its supervisor has exited"):
        restart_part(tmp_path, "postgres")
