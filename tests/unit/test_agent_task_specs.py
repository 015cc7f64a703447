"""The agent's side of notebooks, TensorBoards, commands and shells: its core
keeps their requests, and the task contract (command line, environment,
files) is built as the brief says. Pure: nothing is started."""

import json
from pathlib import Path

import pytest
from test_agent_core import assigned, given, registered

from determined.proto import events_pb2 as ev
from services.agent.containers.spec import Allowed, Placement, container_spec
from services.agent.core import AgentAllocation, allocation_exited, allocation_ready, idle_kill_requested
from services.agent.launch import CONFIG_FILE, AgentIdentity, EntrypointError
from services.agent.private_tmp import TrialTmp
from services.agent.task_launch import (
    TENSORBOARD_SOURCES_FILE,
    free_port,
    has_server,
    plain_task_id,
    proxy_address,
    read_storages,
    task_argv,
    task_environment,
    task_files,
    working_dir,
)
from services.common.tokens import (
    InvalidTokenError,
    task_proxy_token,
    verify_allocation_token,
    verify_session_token,
)

TASK_ID = "6f1c2b1e-8d2a-4c55-9a41-0f7e3c1d2b3a"
IDENTITY = AgentIdentity("a", "cluster-1", "127.0.0.1:8080", "/venv/bin", address="10.0.0.7")


def task_requested(
    task_type: str, *, task_id: str = TASK_ID, config: dict[str, object] | None = None, **launch: object
) -> ev.AllocationRequested:
    return ev.AllocationRequested(
        allocation_id=f"{task_id}.1",
        task_id=task_id,
        task_type=task_type,
        slots=0 if task_type == "TENSORBOARD" else 1,
        job_id=f"task/{task_id}",
        owner="alice",
        task=ev.TaskLaunch(config_json=json.dumps(config or {}), **launch),  # type: ignore[arg-type]
    )


def allocation(task_type: str, **fields: object) -> AgentAllocation:
    return AgentAllocation(task_requested(task_type, **fields), "a", (0,))  # type: ignore[arg-type]


# -- the core ------------------------------------------------------------------------------


def test_a_task_request_is_kept_and_placed_like_a_trials() -> None:
    request = task_requested("COMMAND", command=["echo", "hi"])
    state = given(registered(), request)
    assert list(state.pending) == [f"{TASK_ID}.1"]
    state = given(assigned(f"{TASK_ID}.1", ("a", [])), state=state)
    [placed] = state.allocations.values()
    assert placed.is_task and placed.slot_ids == () and list(placed.task.command) == ["echo", "hi"]


def test_a_ready_task_is_known_as_ready() -> None:
    """A restarted agent that reattaches its container does not say so again."""
    state = given(registered(), task_requested("NOTEBOOK"), assigned(f"{TASK_ID}.1"))
    assert not state.allocations[f"{TASK_ID}.1"].ready
    ready = ev.AllocationReady(allocation_id=f"{TASK_ID}.1", task_id=TASK_ID, proxy_address="h:1")
    assert given(ready, state=state).allocations[f"{TASK_ID}.1"].ready
    assert given(ev.AllocationReady(allocation_id="other.1"), state=state) == state


def test_a_task_reads_its_config_and_context_from_its_launch() -> None:
    placed = AgentAllocation(task_requested("NOTEBOOK", config={"k": 1}, context_hash="abc"), "a", (0,))
    assert placed.config_json == '{"k": 1}' and placed.context_hash == "abc"
    trial = ev.AllocationRequested(
        allocation_id="1.1", trial=ev.TrialLaunch(config_json="{}", context_hash="x")
    )
    assert not AgentAllocation(trial, "a", (0,)).is_task
    assert AgentAllocation(trial, "a", (0,)).context_hash == "x"


def test_a_request_with_no_spec_is_not_kept() -> None:
    state = given(registered(), ev.AllocationRequested(allocation_id="9.1", task_id="9"))
    assert state.pending == {}


def test_a_tasks_events_name_its_task_and_no_trial() -> None:
    placed = allocation("NOTEBOOK")
    ready = allocation_ready(placed, "10.0.0.7:4000")
    assert ready.msg_id == f"allocation-ready-{TASK_ID}.1"
    assert ready.payload == ev.AllocationReady(
        allocation_id=f"{TASK_ID}.1", task_id=TASK_ID, agent_id="a", proxy_address="10.0.0.7:4000"
    )
    kill = idle_kill_requested(placed, "idle_timeout: no activity for 30s")
    assert isinstance(kill.payload, ev.AllocationKillRequested)
    assert kill.payload.reason == "idle_timeout: no activity for 30s" and kill.payload.task_id == TASK_ID
    exited = allocation_exited(placed, 3).payload
    assert isinstance(exited, ev.AllocationExited)
    assert (exited.task_id, exited.trial_id, exited.exit_code) == (TASK_ID, 0, 3)


# -- the command line ----------------------------------------------------------------------


def test_a_command_runs_in_a_shell_its_words_joined() -> None:
    placed = allocation("COMMAND", command=["echo hi;", "exit", "3"])
    assert task_argv(placed) == ["/bin/sh", "-c", "echo hi; exit 3"]


def test_a_command_without_words_runs_its_configs_entrypoint() -> None:
    assert task_argv(allocation("COMMAND", config={"entrypoint": "make data"})) == [
        "/bin/sh",
        "-c",
        "make data",
    ]
    assert task_argv(allocation("COMMAND", config={"entrypoint": ["a", "b"]})) == ["/bin/sh", "-c", "a b"]
    with pytest.raises(EntrypointError, match="the command is empty"):
        task_argv(allocation("COMMAND", command=[" "]))


@pytest.mark.parametrize(
    "task_type, module", [("NOTEBOOK", "notebook"), ("TENSORBOARD", "tensorboard"), ("SHELL", "shell")]
)
def test_the_servers_run_their_harness_module(task_type: str, module: str) -> None:
    assert task_argv(allocation(task_type)) == ["python3", "-m", f"determined.exec.{module}"]
    assert has_server(task_type)


def test_an_unknown_task_type_is_refused() -> None:
    with pytest.raises(EntrypointError, match="'SERVICE'"):
        task_argv(allocation("SERVICE"))
    assert not has_server("COMMAND")


# -- the environment -----------------------------------------------------------------------


def environment(task_type: str, **fields: object) -> dict[str, str]:
    return task_environment(
        allocation(task_type, **fields),
        IDENTITY,
        port=4000,
        token="t0k",
        slot_type="cpu",
        inherited={"PATH": "/usr/bin", "DET_CLUSTER_SECRET": "s3cret", "LANG": "C.UTF-8"},
        folder=Path("/work/x.1"),
    )


def test_a_notebook_gets_its_address_prefix_token_and_config_file() -> None:
    env = environment("NOTEBOOK", config={"environment": {"environment_variables": ["A=1"]}})
    assert env["DET_TASK_HOST"] == "10.0.0.7" and env["DET_TASK_PORT"] == "4000"
    assert env["DET_PROXY_PREFIX"] == f"/proxy/{TASK_ID}/"
    assert env["DET_TASK_TOKEN"] == "t0k"
    assert env["DET_TASK_CONFIG_FILE"] == f"/work/x.1/{CONFIG_FILE}"
    assert env["DET_TASK_ID"] == TASK_ID and env["DET_TASK_TYPE"] == "NOTEBOOK"
    assert env["DET_ALLOCATION_ID"] == f"{TASK_ID}.1" and env["DET_MASTER"] == "127.0.0.1:8080"
    assert env["A"] == "1" and env["LANG"] == "C.UTF-8" and env["PATH"] == "/venv/bin:/usr/bin"


def test_a_task_gets_no_secret_and_no_token_of_the_clusters() -> None:
    for task_type in ("NOTEBOOK", "TENSORBOARD", "COMMAND", "SHELL"):
        env = environment(task_type)
        assert "DET_CLUSTER_SECRET" not in env and "DET_SESSION_TOKEN" not in env
        assert "DET_TRIAL_ID" not in env and "DET_HPARAMS" not in env


def test_only_a_notebook_gets_the_token_and_a_command_no_port() -> None:
    assert "DET_TASK_TOKEN" not in environment("TENSORBOARD")
    command = environment("COMMAND", command=["true"])
    assert not {"DET_TASK_PORT", "DET_TASK_HOST", "DET_PROXY_PREFIX"} & set(command)


def test_a_configured_variable_cannot_replace_the_contracts() -> None:
    env = environment("NOTEBOOK", config={"environment": {"environment_variables": ["DET_TASK_PORT=1"]}})
    assert env["DET_TASK_PORT"] == "4000"


def test_a_shell_gets_its_public_key_and_a_tensorboard_its_sources_file() -> None:
    assert (
        environment("SHELL", shell_public_key="ssh-ed25519 AAAA x")["DET_SHELL_PUBLIC_KEY"]
        == "ssh-ed25519 AAAA x"
    )
    env = environment("TENSORBOARD")
    assert env["DET_TENSORBOARD_SOURCES_FILE"] == f"/work/x.1/{TENSORBOARD_SOURCES_FILE}"


def test_a_tensorboards_sources_file_lists_its_trials_and_their_storage() -> None:
    storage = {"type": "shared_fs", "host_path": "/data/ckpt"}
    sources = [ev.TensorboardSource(experiment_id=3, trial_id=9, storage_json=json.dumps(storage))]
    placed = allocation("TENSORBOARD", tensorboard_sources=sources)
    [(name, text)] = task_files(placed).items()
    assert name == TENSORBOARD_SOURCES_FILE
    assert json.loads(text) == [{"experiment_id": 3, "trial_id": 9, "storage": storage}]
    assert read_storages(placed) == [storage]
    assert task_files(allocation("NOTEBOOK")) == {} and read_storages(allocation("NOTEBOOK")) == []


def test_a_tensorboards_shared_fs_sources_stay_in_its_private_tmp() -> None:
    storages = [{"type": "shared_fs", "host_path": "/tmp/ckpt", "storage_path": "e"}, {"type": "s3"}]
    tmp = TrialTmp.of(Path("/work/x.1"), Path("/work"), "/venv/bin", {}, storages)
    assert "/tmp/ckpt/e" in tmp.keep


def test_a_tensorboard_container_mounts_its_sources_storage_once_read_only() -> None:
    storage = {"type": "shared_fs", "host_path": "/data/ckpt"}
    placement = Placement(f"{TASK_ID}.1", TASK_ID, 0, "a", "cpu", "/work/x.1", 1000, 1000)
    spec = container_spec(
        {"environment": {"image": "tb:1"}},
        placement,
        ["python3", "-m", "determined.exec.tensorboard"],
        {},
        allowed=Allowed(),
        read_storages=[storage, storage],
    )
    [mount] = [m for m in spec.mounts if m.host_path == "/data/ckpt"]
    assert mount.read_only and mount.container_path == "/data/ckpt"


# -- ids, addresses, tokens ----------------------------------------------------------------


def test_only_a_plain_task_id_names_a_log_subject() -> None:
    assert plain_task_id(TASK_ID)
    for bad in ("", "a.b", "a b", "*", ">", "x" * 65, "../x"):
        assert not plain_task_id(bad), bad


def test_a_proxy_address_brackets_ipv6() -> None:
    assert proxy_address("10.0.0.7", 80) == "10.0.0.7:80"
    assert proxy_address("::1", 80) == "[::1]:80"
    assert proxy_address("node-3", 80) == "node-3:80"


def test_a_free_port_is_one_that_can_be_bound() -> None:
    assert 0 < free_port("127.0.0.1") < 65536


def test_a_tasks_proxy_token_is_its_own_and_verifies_as_no_other_token() -> None:
    token = task_proxy_token("secret", TASK_ID)
    assert token == task_proxy_token("secret", TASK_ID)
    assert token not in (task_proxy_token("secret", "other"), task_proxy_token("other", TASK_ID))
    for verify in (verify_allocation_token, verify_session_token):
        with pytest.raises(InvalidTokenError):
            verify("secret", token)


def test_a_task_starts_in_its_work_dir_else_its_context() -> None:
    assert working_dir({}, "/w/x.1/trial") == "/w/x.1/trial"
    assert working_dir({"work_dir": "data"}, "/w/x.1/trial") == "/w/x.1/trial/data"
    assert working_dir({"work_dir": "/mnt/shared"}, "/w/x.1/trial") == "/mnt/shared"
    placement = Placement(f"{TASK_ID}.1", TASK_ID, 0, "a", "cpu", "/w/x.1", 1000, 1000)
    spec = container_spec(
        {"environment": {"image": "i"}, "work_dir": "/mnt/shared"}, placement, ["true"], {}, allowed=Allowed()
    )
    assert spec.working_dir == "/mnt/shared" and spec.env["HOME"] == "/w/x.1/trial"
