"""Several agents in a local cluster: their parts, ids, folders and
environment; agent-up's and agent-down's requests to the supervisor; the
scheduling flags of cluster-up; and an agents-only folder for a cluster
elsewhere."""

import json
import os
from pathlib import Path

import pytest

from deploy.local import decisions, mailbox
from deploy.local.cluster import (
    AgentSpec,
    ClusterOptions,
    ClusterRecord,
    DeployError,
    RemoteCluster,
    added_agent,
    agent_environment,
    agent_work_dir,
    initial_agents,
    remote_environment,
    service_environment,
)
from deploy.local.servers import NatsServer
from determined.cli.__main__ import build_parser
from determined.cli.deploy import scheduler_settings

REMOTE = RemoteCluster("master:8080", "nats://10.0.0.1:4222", "det", "cluster-1", "s3cret")


def test_one_agent_keeps_its_part_and_id_several_are_numbered() -> None:
    assert initial_agents(1, 2, "") == [AgentSpec("agent", os.uname().nodename, 2)]
    assert initial_agents(1, 1, "box") == [AgentSpec("agent", "box", 1)]
    assert initial_agents(3, 2, "") == [AgentSpec(f"agent-{n}", f"agent-{n}", 2) for n in (1, 2, 3)]
    assert [a.agent_id for a in initial_agents(2, 1, "box")] == ["box-1", "box-2"]


def test_an_added_agent_takes_the_first_free_number_or_its_own_id() -> None:
    agents = initial_agents(2, 1, "")
    assert added_agent(agents, "", 4, "gpu") == AgentSpec("agent-3", "agent-3", 4, "gpu")
    assert added_agent(agents[1:], "", 1, "") == AgentSpec("agent-1", "agent-1", 1, "")
    assert added_agent(agents, "big", 8, "") == AgentSpec("agent-big", "big", 8, "")
    with pytest.raises(DeployError, match="agent agent-2 runs here already"):
        added_agent(agents, "agent-2", 1, "")
    with pytest.raises(DeployError, match="cannot be an agent id"):
        added_agent(agents, "a b", 1, "")


def test_the_parts_are_the_services_then_the_agents() -> None:
    assert decisions.part_names() == decisions.PARTS
    assert decisions.part_names(["agent-1", "agent-2"])[-3:] == ("checkpoint", "agent-1", "agent-2")
    assert decisions.part_names(["agent-x"], agents_only=True) == ("agent-x",)


def test_an_agents_only_folder_starts_its_agents_with_no_servers() -> None:
    parts = decisions.initial_parts(("agent-x",))
    assert decisions.to_start(parts, 0.0, shutting_down=False) == ["agent-x"]
    cluster = decisions.initial_parts(decisions.part_names(["agent-1", "agent-2"]))
    assert decisions.to_start(cluster, 0.0, shutting_down=False) == ["nats-server"]
    running = [
        decisions.became_ready(decisions.started(p, 1, 0.0)) if p.name in decisions.SERVERS else p
        for p in cluster
    ]
    assert decisions.to_start(running, 0.0, shutting_down=False)[-2:] == ["agent-1", "agent-2"]


def test_a_record_of_several_agents_round_trips_and_an_old_one_has_one(tmp_path: Path) -> None:
    options = ClusterOptions(
        tmp_path,
        agents=2,
        cpu_slots=2,
        advertise_host="10.0.0.1",
        settings={"DET_SCHEDULER_TYPE": "priority"},
    )
    record = ClusterRecord.of(options)
    record.save(tmp_path)
    loaded = ClusterRecord.load(tmp_path)
    assert loaded is not None and loaded.options(tmp_path) == options
    assert [a.part for a in loaded.agent_specs()] == ["agent-1", "agent-2"]
    assert loaded.part_names()[-2:] == ("agent-1", "agent-2")
    old = ClusterRecord(1, 2, 3, cpu_slots=4, agent_id="box")
    assert old.agent_specs() == [AgentSpec("agent", "box", 4)] and old.part_names() == decisions.PARTS


def test_each_agent_gets_its_id_slots_pool_folder_and_address(tmp_path: Path) -> None:
    options = ClusterOptions(
        tmp_path, advertise_host="10.0.0.1", nats_port=4333, settings={"DET_AGENT_LOST_S": "5.0"}
    )
    base = service_environment(options, tmp_path, "nats://127.0.0.1:4333")
    assert base["DET_ADVERTISED_NATS_URL"] == "nats://10.0.0.1:4333" and base["DET_AGENT_LOST_S"] == "5.0"
    first = agent_environment(base, AgentSpec("agent", "box", 2), tmp_path, "127.0.0.1")
    other = agent_environment(base, AgentSpec("agent-2", "agent-2", 3, "gpu"), tmp_path, "10.0.0.1")
    assert (first["DET_AGENT_ID"], first["DET_AGENT_CPU_SLOTS"], first["DET_AGENT_ADDRESS"]) == (
        "box",
        "2",
        "127.0.0.1",
    )
    # Away from the data folder's secrets (deploy/local/trial_home.py).
    assert first["DET_AGENT_WORK_DIR"] == str(agent_work_dir(tmp_path, "agent"))
    assert tmp_path not in Path(first["DET_AGENT_WORK_DIR"]).parents
    assert (other["DET_AGENT_POOL"], other["DET_AGENT_ADDRESS"]) == ("gpu", "10.0.0.1")
    assert other["DET_AGENT_WORK_DIR"] == str(agent_work_dir(tmp_path, "agent-2"))
    assert Path(other["DET_AGENT_WORK_DIR"]).parent == Path(first["DET_AGENT_WORK_DIR"]).parent


def test_a_remote_agent_reaches_the_cluster_it_was_given(tmp_path: Path) -> None:
    environment = remote_environment(ClusterOptions(tmp_path, gpu=False), tmp_path, REMOTE)
    assert (environment["DET_NATS_URL"], environment["DET_MASTER_ADDRESS"]) == (
        "nats://10.0.0.1:4222",
        "master:8080",
    )
    assert (environment["DET_CLUSTER_SECRET"], environment["DET_CLUSTER_ID"]) == ("s3cret", "cluster-1")
    assert environment["DET_AGENT_GPUS"] == "0" and "DET_DATABASE_URL" not in environment


def test_nats_listens_everywhere_only_when_the_cluster_advertises_an_address(tmp_path: Path) -> None:
    assert "listen: 127.0.0.1:4222" in NatsServer(tmp_path, 4222, tmp_path / "log").config_text()
    assert "listen: 0.0.0.0:4222" in NatsServer(tmp_path, 4222, tmp_path / "log", "0.0.0.0").config_text()


def test_agent_requests_travel_through_the_mailbox(tmp_path: Path) -> None:
    agent = AgentSpec("agent-3", "agent-3", 2, "gpu")
    mailbox.post(tmp_path, mailbox.Request("add-agent", ("agent-3",), agent))
    mailbox.post(tmp_path, mailbox.Request("remove-agent", ("agent-3",)))
    known = decisions.part_names(["agent-3"])
    assert mailbox.take(tmp_path, decisions.PARTS)[0] == mailbox.Request("add-agent", ("agent-3",), agent)
    assert mailbox.take(tmp_path, known) == []  # each request is taken once
    mailbox.post(tmp_path, mailbox.Request("remove-agent", ("agent-3",)))
    assert mailbox.take(tmp_path, known) == [mailbox.Request("remove-agent", ("agent-3",))]


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (
            {"action": "add-agent", "parts": ["agent"], "agent": {"part": "agent", "agent_id": "x"}},
            "there is a part called agent already",
        ),
        ({"action": "add-agent", "agent": {"part": "agent-9", "agent_id": "x", "cpu_slots": 0}}, "1 or more"),
        ({"action": "add-agent", "agent": {"name": "x"}}, '"agent" must be'),
        ({"action": "remove-agent", "parts": ["agent-9"]}, "parts must be a list of"),
    ],
)
def test_bad_agent_requests_are_refused(document: dict[str, object], message: str) -> None:
    with pytest.raises(mailbox.BadRequestError, match=message):
        mailbox.parse(json.dumps(document))


def test_cluster_up_passes_the_scheduling_flags_as_settings() -> None:
    args = build_parser().parse_args(
        [
            "deploy",
            "local",
            "cluster-up",
            "--agents",
            "2",
            "--scheduler",
            "priority",
            "--pool-scheduler",
            "gpu=fair_share",
            "--pool-scheduler",
            "cpu = priority",
            "--agent-lost-s",
            "5",
            "--min-run-s",
            "0",
        ]
    )
    assert args.agents == 2
    assert scheduler_settings(args) == {
        "DET_SCHEDULER_TYPE": "priority",
        "DET_SCHEDULER_POOL_TYPES": "gpu=fair_share,cpu=priority",
        "DET_AGENT_LOST_S": "5.0",
        "DET_SCHEDULER_MIN_RUN_S": "0.0",
    }
    assert scheduler_settings(build_parser().parse_args(["deploy", "local", "cluster-up"])) == {}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["cluster-up", "--agents", "0"], "0 is less than 1"),
        (["cluster-up", "--pool-scheduler", "gpu"], "'gpu' is not POOL=fair_share or POOL=priority"),
        (["cluster-up", "--scheduler", "fifo"], "invalid choice: 'fifo'"),
        (["cluster-up", "--agent-lost-s", "0"], "0 is not above 0"),
        (["cluster-up", "--min-run-s", "inf"], "'inf' is not a number of seconds"),
        (["agent-up", "--agent-id", "a/b"], "'a/b' cannot be an agent id"),
        (["agent-up", "--master-port", "70000"], "70000 is not a port"),
        (["agent-up", "--cpu-slots", "0"], "0 is less than 1"),
    ],
)
def test_deploy_flags_are_checked_at_parse_time(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["deploy", "local", *argv])
    assert message in capsys.readouterr().err


def test_gangs_reach_agents_at_the_advertised_address_else_loopback_else_the_host_name(
    tmp_path: Path,
) -> None:
    from dataclasses import asdict

    from deploy.local.parts import PartRunner

    local = ClusterRecord.of(ClusterOptions(tmp_path))
    advertised = ClusterRecord.of(ClusterOptions(tmp_path, advertise_host="10.0.0.1"))
    remote = ClusterRecord(0, 0, 0, agents=[asdict(AgentSpec("agent-x", "x"))], remote=asdict(REMOTE))
    addresses = [PartRunner(tmp_path, record).agent_address for record in (local, advertised, remote)]
    assert addresses == ["127.0.0.1", "10.0.0.1", ""]
    assert PartRunner(tmp_path, advertised).nats.listen_host == "0.0.0.0"
    assert remote.part_names() == ("agent-x",)
