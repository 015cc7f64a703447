"""The supervisor of a local cluster, end to end with real processes and the
real `det deploy local` (issue 7):

- a service killed with SIGKILL is started again with no user action; the status (file,
  `det deploy local status`, `det master info`) shows restarts=1 and why it stopped;
- `restart-service` knows nats-server and postgres, and the cluster keeps answering;
- `cluster-up` says with its exit status what it did: 3 on a healthy cluster, 4 when it
  started a part that was down, 4 when it replaced a supervisor killed with SIGKILL;
- `cluster-down` leaves no process behind, trials included;
- a part that cannot start fails cluster-up (exit 1) naming it, with nothing left running;
- as root, no folder outside the data folder changes mode (PostgreSQL's data lives in
  /var/lib/determined-es, owned by its own user);
- (issue 8) `cluster-up --agents 2` runs agent-1 and agent-2, each its own part and agent;
  `agent-up` adds one to a running cluster and `agent-down` stops and forgets it.
"""

import json
import os
import shutil
import signal
import stat
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.chaos_checks import cluster_processes, part_status, wait_until_restarted
from support.e2e_cluster import Cluster, started_cluster, wait_for

from deploy.local.cluster import agent_work_dir
from deploy.local.credentials import credentials
from deploy.local.servers import postgres_bin_dir
from services.common.processes import process_alive

pytestmark = pytest.mark.e2e

SLEEPING_TRAIN_PY = "import time\nprint('sleeping', flush=True)\ntime.sleep(600)\n"
CONFIG = json.dumps(
    {
        "name": "sleeper",
        "entrypoint": "python3 train.py",
        "hyperparameters": {},
        "searcher": {"name": "single", "metric": "x", "max_length": {"batches": 1}},
        "max_restarts": 0,
    }
)


def watched_folders(data_dir: Path) -> list[Path]:
    """Folders cluster-up must leave as they are: the home folder, those above the
    data folder, the virtual environment and those above PostgreSQL's binaries."""
    binaries = postgres_bin_dir()
    return sorted(
        {
            Path.home(),
            *data_dir.parents,
            Path(sys.prefix),
            *Path(sys.prefix).parents,
            binaries,
            *binaries.parents,
        }
    )


def modes(paths: list[Path]) -> dict[str, int]:
    return {str(path): stat.S_IMODE(path.stat().st_mode) for path in paths}


@pytest.fixture(scope="module")
def modes_before() -> dict[str, int]:
    return modes(watched_folders(Path("/tmp") / "any"))


@pytest.fixture(scope="module")
def cluster(modes_before: dict[str, int]) -> Iterator[Cluster]:
    with started_cluster("det-e2e-supervisor") as running:
        yield running


def status(cluster: Cluster) -> dict[str, Any]:
    return dict(cluster.json("deploy", "local", "status", "--data-dir", str(cluster.data_dir)))


def states(cluster: Cluster) -> dict[str, str]:
    return {part["name"]: part["state"] for part in status(cluster)["parts"]}


def all_running(cluster: Cluster) -> bool:
    return set(states(cluster).values()) == {"running"}


def local(cluster: Cluster, *args: str) -> Any:
    return cluster.det("deploy", "local", *args, "--data-dir", str(cluster.data_dir), check=False)


def start_sleeping_trial(cluster: Cluster, context: Path) -> int:
    """Starts an experiment whose trial sleeps; returns the pid of the trial's process."""
    (context / "train.py").write_text(SLEEPING_TRAIN_PY)
    cluster.create(context, CONFIG)
    work_dir = agent_work_dir(cluster.data_dir, "agent")
    record = wait_for(lambda: next(iter(work_dir.glob("*/process.json")), None), "the trial's process record")
    assert record is not None
    return int(json.loads(record.read_text())["pid"])


def test_cluster_up_changes_no_mode_outside_the_data_folder(
    cluster: Cluster, modes_before: dict[str, int]
) -> None:
    assert modes(watched_folders(cluster.data_dir)) == modes_before
    place = Path(status(cluster)["postgres_data_dir"])
    assert place == cluster.data_dir / "postgres"  # its user reaches the data folder here
    assert stat.S_IMODE(place.stat().st_mode) == 0o700
    assert (place.stat().st_uid != 0) is (os.geteuid() == 0)


@pytest.mark.skipif(os.geteuid() != 0, reason="PostgreSQL changes user only when started as root")
def test_a_data_folder_closed_to_postgres_user_puts_its_data_in_var_lib() -> None:
    closed = Path(tempfile.mkdtemp(prefix="det-e2e-closed-", dir="/tmp"))  # 0700, as /root is
    before = modes(watched_folders(closed / "data") + [closed])
    closed_cluster = Cluster(closed / "data")
    try:
        started = closed_cluster.up()
        assert started.returncode == 0, started
        place = Path(status(closed_cluster)["postgres_data_dir"])
        assert place.parent.parent == Path("/var/lib/determined-es")
        assert f"PostgreSQL data in {place}" in started.stdout
        assert stat.S_IMODE(place.stat().st_mode) == 0o700 and place.stat().st_uid != 0
        owner = json.loads((place.parent / "owner.json").read_text())
        assert owner["data_dir"] == str(closed / "data")
        assert all_running(closed_cluster)
        assert modes(watched_folders(closed / "data") + [closed]) == before
    finally:
        closed_cluster.down()
        shutil.rmtree(closed, ignore_errors=True)


def test_a_killed_service_is_restarted_and_why_is_recorded(cluster: Cluster) -> None:
    before = part_status(cluster.data_dir, "searcher")
    os.kill(before["pid"], signal.SIGKILL)
    after = wait_until_restarted(cluster.data_dir, "searcher", before)
    assert after["restarts"] == before["restarts"] + 1
    assert after["last_error"].startswith("killed by signal 9 (SIGKILL)\nthe end of ")
    shown = cluster.det("deploy", "local", "status", "--data-dir", str(cluster.data_dir)).stdout
    assert "killed by signal 9 (SIGKILL)" in shown
    parts = {part["name"]: part for part in cluster.json("master", "info")["parts"]}
    assert set(parts) == {
        "nats-server",
        "postgres",
        "gateway",
        "searcher",
        "scheduler",
        "checkpoint",
        "agent",
    }
    assert parts["searcher"]["restarts"] == after["restarts"] and parts["searcher"]["pid"] == after["pid"]


@pytest.mark.parametrize("name", ["nats-server", "postgres"])
def test_restart_service_knows_the_servers_and_the_cluster_keeps_answering(
    cluster: Cluster, name: str
) -> None:
    before = part_status(cluster.data_dir, name)
    restarted = local(cluster, "restart-service", name)
    assert restarted.returncode == 0 and restarted.stdout.strip() == f"Restarted the {name} service", (
        restarted
    )
    after = part_status(cluster.data_dir, name)
    assert after["pid"] != before["pid"] and after["state"] == "running"
    assert after["restarts"] == before["restarts"]  # asked for: not a crash
    wait_for(lambda: cluster.det("experiment", "list", check=False).returncode == 0, "the cluster to answer")


def test_cluster_up_starts_a_stopped_part_and_then_finds_nothing_to_do(cluster: Cluster) -> None:
    assert local(cluster, "stop-service", "scheduler").returncode == 0
    assert states(cluster)["scheduler"] == "stopped"
    repaired = cluster.up()
    assert repaired.returncode == 4, repaired
    assert "started scheduler again" in repaired.stdout
    assert all_running(cluster)
    again = cluster.up()
    assert again.returncode == 3, again
    assert "already running" in again.stdout


def test_cluster_up_replaces_a_killed_supervisor(cluster: Cluster, tmp_path: Path) -> None:
    trial_pid = start_sleeping_trial(cluster, tmp_path)
    old = status(cluster)
    os.kill(old["supervisor_pid"], signal.SIGKILL)
    wait_for(lambda: not status(cluster)["supervisor_alive"], "the supervisor to be gone")
    repaired = cluster.up()
    assert repaired.returncode == 4, repaired
    assert "its supervisor had exited" in repaired.stdout
    new = status(cluster)
    assert new["supervisor_alive"] and new["supervisor_pid"] != old["supervisor_pid"]
    assert all_running(cluster)
    old_pids = {part["pid"] for part in old["parts"]} | {trial_pid}
    assert not [pid for pid in old_pids if process_alive(pid)]


def test_cluster_down_leaves_no_process(tmp_path: Path) -> None:
    with started_cluster("det-e2e-down") as running:
        trial_pid = start_sleeping_trial(running, tmp_path)
        recorded = status(running)
        pids = {part["pid"] for part in recorded["parts"]} | {recorded["supervisor_pid"], trial_pid}
        down = running.down()
        assert down.returncode == 0 and down.stdout.strip() == "Cluster stopped"
        assert not cluster_processes(running.data_dir, pids)
        assert not (running.data_dir / "run" / "status.json").exists()
        again = running.down()
        assert again.stdout.strip() == f"No cluster is running from {running.data_dir}"


def test_a_part_that_cannot_start_fails_cluster_up_naming_it(tmp_path: Path) -> None:
    data_dir = Path("/tmp") / f"det-e2e-broken-{uuid.uuid4().hex[:8]}"
    broken = Cluster(data_dir)
    broken.env["DET_PG_BIN"] = str(tmp_path / "no-postgres-here")
    try:
        result = broken.up()
        assert result.returncode == 1, result
        assert result.stderr.startswith("postgres failed: could not start: ")
        assert not cluster_processes(data_dir)
        assert not (data_dir / "run" / "cluster.json").exists()
    finally:
        broken.down()
        shutil.rmtree(data_dir, ignore_errors=True)


def test_the_supervisor_logs_one_line_per_event(cluster: Cluster) -> None:
    lines = (cluster.data_dir / "logs" / "supervisor.log").read_text().splitlines()
    assert any(
        "searcher: killed by signal 9 (SIGKILL); starting it again in 0.5 s (restart 1)" in line
        for line in lines
    ), lines
    assert any(line.endswith("asked to restart postgres") for line in lines)


def agents(cluster: Cluster) -> dict[str, dict[str, Any]]:
    return {agent["agent_id"]: agent for agent in cluster.json("agent", "list")}


def test_agent_up_adds_an_agent_and_agent_down_removes_it(cluster: Cluster) -> None:
    added = local(cluster, "agent-up", "--cpu-slots", "1", "--pool", "extra")
    assert added.returncode == 0, added.stderr
    assert added.stdout.strip() == "Agent agent-1 is up (part agent-1, pool extra)"
    assert states(cluster)["agent-1"] == "running"
    [recorded] = [a for a in status(cluster)["agents"] if a["part"] == "agent-1"]
    assert (recorded["agent_id"], recorded["cpu_slots"], recorded["pool"]) == ("agent-1", 1, "extra")
    registered = wait_for(lambda: agents(cluster).get("agent-1") or {}, "agent-1 registered")
    assert (registered["resource_pool"], registered["state"], len(registered["slots"])) == (
        "extra",
        "ENABLED",
        1,
    )
    assert cluster.det("agent", "disable", "agent-1", "--drain").stdout.startswith("Disabled agent agent-1")
    assert cluster.det("agent", "enable", "agent-1").stdout.strip() == "Enabled agent agent-1"
    taken = local(cluster, "agent-up", "--agent-id", "agent-1")
    assert taken.returncode == 1 and "agent agent-1 runs here already" in taken.stderr
    removed = local(cluster, "agent-down", "--agent-id", "agent-1")
    assert (
        removed.returncode == 0
        and removed.stdout.strip() == "Agent agent-1 is down and removed (part agent-1)"
    )
    assert "agent-1" not in states(cluster) and all_running(cluster)
    assert [a["part"] for a in status(cluster)["agents"]] == ["agent"]


def test_cluster_up_runs_several_agents() -> None:
    data_dir = Path("/tmp") / f"det-e2e-agents-{uuid.uuid4().hex[:8]}"
    several = Cluster(data_dir)
    try:
        up = several.det(
            "deploy",
            "local",
            "cluster-up",
            "--data-dir",
            str(data_dir),
            "--no-gpu",
            "--agents",
            "2",
            "--cpu-slots",
            "2",
            "--master-port",
            str(several.master_port),
            "--nats-port",
            str(several.nats_port),
            "--postgres-port",
            str(several.postgres_port),
            "--scheduler",
            "priority",
            "--agent-lost-s",
            "5",
        )
        assert up.returncode == 0, up.stderr
        parts = states(several)
        assert parts["agent-1"] == parts["agent-2"] == "running" and "agent" not in parts
        found = wait_for(lambda: both if len(both := agents(several)) == 2 else {}, "both agents registered")
        assert sorted(found) == ["agent-1", "agent-2"]
        assert all(len(agent["slots"]) == 2 for agent in found.values())
        assert agent_work_dir(data_dir, "agent-2").is_dir()
        jobs = several.json("job", "list")
        assert jobs["schedulers"]["default"] == "priority"
    finally:
        several.down()
        shutil.rmtree(data_dir, ignore_errors=True)


def test_an_agent_for_a_cluster_elsewhere_runs_under_its_own_supervisor(
    cluster: Cluster, tmp_path: Path
) -> None:
    """The master here is reached as another machine would reach it (NATS at the address
    GetMaster gives); the agent's folder has a supervisor of its own."""
    folder = tmp_path / "remote-agent"
    remote = ("--data-dir", str(folder))
    no_secret = cluster.det(
        "deploy",
        "local",
        "agent-up",
        "--master-host",
        "127.0.0.1",
        "--master-port",
        str(cluster.master_port),
        *remote,
        check=False,
    )
    assert no_secret.returncode == 1 and "needs its own secret file" in no_secret.stderr
    made = cluster.det(
        "deploy", "local", "agent-credentials", "--agent-id", "far-away", "--data-dir", str(cluster.data_dir)
    )
    secret_file = cluster.data_dir / "agent-secrets" / "far-away.secret"
    assert str(secret_file) in made.stdout
    up = cluster.det(
        "deploy",
        "local",
        "agent-up",
        "--master-host",
        "127.0.0.1",
        "--master-port",
        str(cluster.master_port),
        "--cpu-slots",
        "3",
        "--secret-file",
        str(secret_file),
        "--no-gpu",
        *remote,
        check=False,
    )
    assert up.returncode == 0, up.stderr
    registered = wait_for(lambda: agents(cluster).get("far-away") or {}, "the remote agent registered")
    assert len(registered["slots"]) == 3
    own = json.loads(cluster.det("deploy", "local", "status", "--json", *remote).stdout)
    assert [part["name"] for part in own["parts"]] == ["agent-far-away"] and own["supervisor_alive"]
    down = cluster.det("deploy", "local", "agent-down", *remote, check=False)
    assert down.returncode == 0, down.stderr
    assert not (folder / "run" / "cluster.json").exists()  # its last agent gone, its supervisor stopped
    cluster.det(
        "deploy",
        "local",
        "agent-credentials",
        "--agent-id",
        "far-away",
        "--revoke",
        "--data-dir",
        str(cluster.data_dir),
    )
    assert not secret_file.exists() and "agent:far-away" not in credentials(cluster.data_dir).nats
