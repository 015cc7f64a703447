"""The agent's pure core and its launch contract (command line, environment)."""

import json

import pytest
from google.protobuf.message import Message

from determined.proto import events_pb2 as ev
from services.agent.core import AgentCore, AgentState
from services.agent.launch import AgentIdentity, EntrypointError, entrypoint_argv, trial_environment
from services.agent.slots import detect_slots
from services.common.envelope import Append, wrap

core = AgentCore("a")


def given(*payloads: Message, state: AgentState | None = None) -> AgentState:
    state = state or core.initial_state()
    for n, payload in enumerate(payloads):
        state = core.evolve(state, wrap(Append("x/1", payload, f"given-{n}"), actor="test", occurred_at_ns=0))
    return state


def assigned(allocation_id: str, agent_id: str = "a", **extra: object) -> ev.AllocationAssigned:
    return ev.AllocationAssigned(
        allocation_id=allocation_id, trial_id=int(allocation_id.split(".")[0]), agent_id=agent_id, **extra
    )


def test_tracks_only_this_agents_open_allocations() -> None:
    state = given(
        ev.AgentRegistered(agent_id="a"), assigned("1.1"), assigned("2.1", agent_id="b"), assigned("3.1")
    )
    state = given(
        ev.AllocationExited(allocation_id="3.1"), ev.AllocationKillRequested(allocation_id="1.1"), state=state
    )
    assert list(state.allocations) == ["1.1"]
    assert state.allocations["1.1"].kill_requested
    assert core.decide(state) == []


def test_a_restart_closes_what_the_previous_run_left_open() -> None:
    state = given(ev.AgentRegistered(agent_id="a"), assigned("1.1", experiment_id=4), assigned("2.1"))
    state = given(ev.AllocationExited(allocation_id="2.1"), ev.AgentRegistered(agent_id="b"), state=state)
    assert core.decide(state) == []
    state = given(ev.AgentRegistered(agent_id="a"), assigned("3.1"), state=state)
    [append] = core.decide(state)
    exited = append.payload
    assert (append.aggregate, append.msg_id) == ("allocation/1.1", "allocation-exited-1.1")
    assert (exited.exit_code, exited.error, exited.experiment_id, exited.agent_id) == (
        -1,
        "agent restarted",
        4,
        "a",
    )
    assert core.decide(given(exited, state=state)) == []


def test_entrypoint_forms() -> None:
    assert entrypoint_argv({"entrypoint": "python3 train.py"}, startup_hook=False) == [
        "sh",
        "-c",
        "python3 train.py",
    ]
    assert entrypoint_argv({"entrypoint": ["python3", "x.py"]}, startup_hook=False) == ["python3", "x.py"]
    hooked = entrypoint_argv({"entrypoint": ["python3", "x.py"]}, startup_hook=True)
    assert hooked[:2] == ["bash", "-c"] and "source ./startup-hook.sh" in hooked[2]
    assert hooked[3:] == ["bash", "python3", "x.py"]
    with pytest.raises(EntrypointError, match="legacy"):
        entrypoint_argv({"entrypoint": "model_def:MyTrial"}, startup_hook=False)
    with pytest.raises(EntrypointError):
        entrypoint_argv({}, startup_hook=False)


def test_trial_environment_follows_the_contract() -> None:
    config = {"environment": {"environment_variables": {"cpu": ["A=1", "B=x=y"], "cuda": ["A=2"]}}}
    allocation = assigned(
        "7.2",
        experiment_id=3,
        slot_ids=[0, 1],
        trial_run_id=2,
        trial_seed=9,
        config_json=json.dumps(config),
        hparams_json='{"lr": 1}',
        steps_completed=100,
        latest_checkpoint="ck-1",
    )
    identity = AgentIdentity("a", "cluster-1", "gw:8080", "/venv/bin")
    inherited = {
        "PATH": "/usr/bin",
        "HOME": "/root",
        "DET_CLUSTER_SECRET": "s3cret",
        "DET_NATS_URL": "nats://x",
    }
    env = trial_environment(allocation, identity, session_token="tok", slot_type="cpu", inherited=inherited)
    assert env["PATH"] == "/venv/bin:/usr/bin" and env["HOME"] == "/root"
    assert "DET_CLUSTER_SECRET" not in env and "DET_NATS_URL" not in env
    assert (env["A"], env["B"]) == ("1", "x=y")
    assert (
        env["DET_MASTER"] == "gw:8080" and env["DET_CLUSTER_ID"] == "cluster-1" and env["DET_AGENT_ID"] == "a"
    )
    assert json.loads(env["DET_SLOT_IDS"]) == [0, 1]
    assert (env["DET_TASK_ID"], env["DET_TRIAL_ID"], env["DET_ALLOCATION_ID"]) == ("7", "7", "7.2")
    assert (env["DET_EXPERIMENT_ID"], env["DET_TRIAL_RUN_ID"], env["DET_TRIAL_SEED"]) == ("3", "2", "9")
    assert env["DET_SESSION_TOKEN"] == "tok" and env["DET_TASK_TYPE"] == "TRIAL"
    assert json.loads(env["DET_EXPERIMENT_CONFIG"]) == config and env["DET_HPARAMS"] == '{"lr": 1}'
    assert (env["DET_STEPS_COMPLETED"], env["DET_LATEST_CHECKPOINT"], env["PYTHONUNBUFFERED"]) == (
        "100",
        "ck-1",
        "1",
    )
    plain = trial_environment(assigned("1.1"), identity, session_token="t", slot_type="cuda", inherited={})
    assert "DET_LATEST_CHECKPOINT" not in plain and plain["PATH"] == "/venv/bin"


def test_slots_are_gpus_when_nvml_sees_some_else_cpus() -> None:
    slots = detect_slots(2)
    types = {slot.type for slot in slots}
    assert types == {"cuda"} or [(s.slot_id, s.type) for s in slots] == [(0, "cpu"), (1, "cpu")]


def test_gpus_can_be_left_out() -> None:
    assert [(s.slot_id, s.type) for s in detect_slots(3, use_gpus=False)] == [(0, "cpu"), (1, "cpu"), (2, "cpu")]
