"""Finding 2 of issue 17, the pure decisions: who a trial runs as, what of the
agent's environment it gets, where its folders are, and which records the
agent trusts to kill a process group."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_agent_core import allocation_of

from deploy.local import trial_home as trial_home_module
from deploy.local.postgres_home import SYSTEM_HOME
from deploy.local.trial_home import (
    checkpoint_folder,
    open_to_others,
    trial_home,
    trial_user_name,
    trial_user_note,
)
from services.agent.launch import CONFIG_FILE, TRIAL_FOLDER, AgentIdentity, passed_on, trial_environment
from services.agent.trial_user import (
    PythonFacts,
    TrialUserError,
    can_run,
    interpreter_reachable,
    reachable,
    system_candidates,
)
from services.agent.trial_user import trial_user_name as agent_trial_user_name
from services.common.os_users import OsUser
from services.common.processes import (
    ProcessRecord,
    kill_recorded_process_group,
    start_ticks,
    write_process_record,
)

USER = OsUser("determined-trial", 60001, 60001, frozenset({60001}))
IDENTITY = AgentIdentity("a", "c", "gw:8080", "/venv/bin")


def test_only_a_root_agent_given_a_user_switches_and_never_to_root() -> None:
    assert agent_trial_user_name("determined-trial", euid=0) == "determined-trial"
    assert agent_trial_user_name("determined-trial", euid=1000) is None  # cannot switch
    assert agent_trial_user_name("", euid=0) is None  # as root, said loudly by the agent
    for root in ("root", "0"):
        with pytest.raises(TrialUserError, match="may not run as root"):
            agent_trial_user_name(root, euid=0)


def test_cluster_up_gives_root_agents_the_dedicated_user_unless_told_otherwise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("DET_AGENT_TRIAL_USER", raising=False)
    assert trial_user_name({}, euid=0) == "determined-trial"
    assert trial_user_name({"DET_AGENT_TRIAL_USER": "alice"}, euid=0) == "alice"
    assert trial_user_name({"DET_AGENT_TRIAL_USER": ""}, euid=0) == ""
    assert trial_user_name({"DET_AGENT_TRIAL_USER": "alice"}, euid=1000) == ""
    monkeypatch.setenv("DET_AGENT_TRIAL_USER", "bob")
    assert trial_user_name({}, euid=0) == "bob"


def test_cluster_up_says_who_trials_run_as(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trial_home_module.os, "geteuid", lambda: 1000)
    assert trial_user_note("").startswith("Trials run with your rights (cluster-up is not root")
    monkeypatch.setattr(trial_home_module.os, "geteuid", lambda: 0)
    assert "Trials run as root" in trial_user_note("")


def test_no_secret_of_the_agents_environment_reaches_a_trial() -> None:
    agent = {
        "DET_CLUSTER_SECRET": "s",
        "DET_NATS_PASSWORD": "p",
        "DET_NATS_USER": "agent",
        "DET_DATABASE_URL": "pg://",
        "DATABASE_URL": "pg://",
        "AWS_SECRET_ACCESS_KEY": "k",
        "SOME_TOKEN": "t",
        "PGPASSWORD": "p",
        "HOME": "/root",
        "USER": "root",
        "PATH": "/usr/bin",
        "PYTHONPATH": "/checkout/harness",
        "LANG": "C.UTF-8",
        "LC_ALL": "C",
        "TZ": "UTC",
        "CUDA_HOME": "/cuda",
        "NCCL_DEBUG": "INFO",
        "https_proxy": "http://proxy",
    }
    assert passed_on(agent, own_user=False) == {
        "PYTHONPATH": "/checkout/harness",  # the agent's Python runs the trial: the same packages
        "LANG": "C.UTF-8",
        "LC_ALL": "C",
        "TZ": "UTC",
        "CUDA_HOME": "/cuda",
        "NCCL_DEBUG": "INFO",
        "https_proxy": "http://proxy",
    }
    assert passed_on(agent, own_user=True)["HOME"] == "/root"

    folder = Path("/work/1.1")
    env = trial_environment(
        allocation_of("1.1"),
        IDENTITY,
        session_token="t",
        slot_type="cpu",
        inherited=agent,
        folder=folder,
        user=USER,
    )
    assert not {
        "DET_CLUSTER_SECRET",
        "DET_NATS_PASSWORD",
        "DET_DATABASE_URL",
        "AWS_SECRET_ACCESS_KEY",
        "SOME_TOKEN",
        "PGPASSWORD",
        "DATABASE_URL",
    } & set(env)
    assert (env["HOME"], env["USER"], env["LOGNAME"]) == (str(folder / TRIAL_FOLDER), USER.name, USER.name)
    assert env["PATH"] == "/venv/bin:/usr/bin"
    assert env["DET_EXPERIMENT_CONFIG_FILE"] == str(folder / CONFIG_FILE)


def test_a_program_runs_only_where_its_folders_and_its_mode_let_the_user(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    program = tmp_path / "program"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    assert can_run(program, USER) is reachable(tmp_path, USER)
    program.chmod(0o750)  # root's group: not the trial user's
    assert not can_run(program, USER)
    assert not can_run(tmp_path / "missing", USER)


def test_a_folder_is_reachable_only_through_folders_open_to_the_user(tmp_path: Path) -> None:
    closed = tmp_path / "closed" / "inner"
    closed.mkdir(parents=True)
    (tmp_path / "closed").chmod(0o700)
    opened = tmp_path / "open" / "inner"
    opened.mkdir(parents=True)
    (tmp_path / "open").chmod(0o711)
    tmp_path.chmod(0o755)
    assert not reachable(closed, USER)
    assert reachable(opened, USER) is open_to_others(opened)  # the same, for a user who owns nothing there
    assert not reachable(tmp_path / "missing", USER)


def test_the_agents_python_is_used_when_the_trial_user_can_run_it(tmp_path: Path) -> None:
    facts = PythonFacts(Path(sys.executable), tmp_path / "lib", (tmp_path / "site",), (3, 11))
    (tmp_path / "lib").mkdir()
    (tmp_path / "site").mkdir()
    (tmp_path / "lib").chmod(0o700)
    assert not interpreter_reachable(facts, USER)
    assert system_candidates((3, 11)) == [Path("/usr/bin/python3.11"), Path("/usr/local/bin/python3.11")]


def test_work_folders_are_away_from_the_data_folder_and_checkpoints_where_trials_reach() -> None:
    data = Path("/srv/det")
    as_root = trial_home(data, "c-1", euid=0, cache_home=Path("/home/op/.cache"))
    assert as_root.parent == SYSTEM_HOME and data not in as_root.parents
    operator = trial_home(data, "c-1", euid=1000, cache_home=Path("/home/op/.cache"))
    assert operator.parent == Path("/home/op/.cache/determined-es") and operator.name == as_root.name
    assert trial_home(data, "c-2", euid=0, cache_home=Path("/x")) != as_root  # a new cluster, a new home

    assert (
        checkpoint_folder(data, as_root, trial_user="determined-trial", data_dir_open=True)
        == data / "checkpoints"
    )
    assert checkpoint_folder(data, as_root, trial_user="determined-trial", data_dir_open=False) == (
        as_root / "checkpoints"
    )
    assert checkpoint_folder(data, operator, trial_user="", data_dir_open=False) == data / "checkpoints"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs a process of another user")
def test_a_record_written_by_another_user_kills_only_that_users_processes(tmp_path: Path) -> None:
    """A record a trial could write (the file is its user's) naming a group of root's
    processes (a service's) is not followed; the same record written by root is."""
    victim = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        ticks = start_ticks(victim.pid)
        assert ticks is not None
        record = tmp_path / "process.json"
        write_process_record(record, ProcessRecord("a", "1.1", victim.pid, victim.pid, ticks))
        os.chown(record, USER.uid, USER.gid)
        assert not kill_recorded_process_group(record, grace_s=1)
        assert victim.poll() is None
        os.chown(record, 0, 0)
        assert kill_recorded_process_group(record, grace_s=1)
        deadline = time.monotonic() + 10
        while victim.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert victim.returncode is not None
    finally:
        victim.kill()
        victim.wait()


def test_the_harness_reads_the_config_from_its_file(tmp_path: Path) -> None:
    from determined._info import TrialInfo

    config = {"data": {"blob": "x" * (300 * 1024)}, "name": "big"}
    (tmp_path / CONFIG_FILE).write_text(json.dumps(config))
    env = {
        "DET_TRIAL_ID": "1",
        "DET_EXPERIMENT_ID": "1",
        "DET_EXPERIMENT_CONFIG_FILE": str(tmp_path / CONFIG_FILE),
    }
    assert TrialInfo._from_env(env)._config == config
    # Test mode (and an older agent) still give it in the environment.
    assert TrialInfo._from_env({**env, "DET_EXPERIMENT_CONFIG": '{"name": "env"}'})._config == {"name": "env"}
