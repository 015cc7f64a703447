"""Which entrypoints the agent's fork server may run (`forkable_argv`), and
how cluster-up turns it on."""

from pathlib import Path
from typing import Any

import pytest

from deploy.local.cluster import ClusterOptions, ClusterRecord, service_environment
from services.agent.__main__ import AgentSettings
from services.agent.launch import forkable_argv


def _forkable(entrypoint: object, *, hook: bool = False, variables: Any = None) -> list[str] | None:
    config: dict[str, Any] = {"entrypoint": entrypoint}
    if variables is not None:
        config["environment"] = {"environment_variables": variables}
    return forkable_argv(config, startup_hook=hook, slot_type="cpu")


@pytest.mark.parametrize(
    ("entrypoint", "argv"),
    [
        ("python3 train.py", ["train.py"]),
        ("  python train.py --lr=0.1 --epochs 3 ", ["train.py", "--lr=0.1", "--epochs", "3"]),
        ("python3 sub/dir/train.py", ["sub/dir/train.py"]),
        (["python3", "train.py", "a b", "$HOME"], ["train.py", "a b", "$HOME"]),
        (["python", "/abs/train.py"], ["/abs/train.py"]),
    ],
)
def test_a_plain_python_script_is_forkable(entrypoint: object, argv: list[str]) -> None:
    assert _forkable(entrypoint) == argv


@pytest.mark.parametrize(
    "entrypoint",
    [
        "python3 train.py && echo done",
        "python3 train.py; true",
        "python3 train.py > out.txt",
        "python3 train.py | tee log",
        "python3 train.py $ARGS",
        "python3 train.py 'quoted arg'",
        "FOO=1 python3 train.py",
        "python3 -m train",
        "python3 -u train.py",
        "python3",
        "python3 train.sh",
        "/usr/bin/python3 train.py",
        "python3.11 train.py",
        "sh -c 'python3 train.py'",
        "model_def:MyTrial",
        ["python3"],
        ["python3", "-c", "print(1)"],
        ["bash", "train.py"],
        [],
        None,
        ["python3", 1],
    ],
)
def test_anything_else_runs_as_a_new_process(entrypoint: object) -> None:
    assert _forkable(entrypoint) is None


def test_a_startup_hook_or_an_interpreter_variable_rules_forking_out() -> None:
    assert _forkable("python3 train.py", hook=True) is None
    for name in ("PATH", "PYTHONPATH", "PYTHONHASHSEED", "LD_PRELOAD", "LD_LIBRARY_PATH"):
        assert _forkable("python3 train.py", variables=[f"{name}=x"]) is None
    assert _forkable("python3 train.py", variables=["PYTHONUNBUFFERED=1", "OMP_NUM_THREADS=2"]) == [
        "train.py"
    ]
    # Per slot type: only the agent's own (cpu) list counts.
    assert _forkable("python3 t.py", variables={"cuda": ["PYTHONPATH=/x"], "cpu": []}) == ["t.py"]
    assert _forkable("python3 t.py", variables={"cpu": ["PYTHONPATH=/x"]}) is None


def test_cluster_up_fork_trials_reaches_the_agents_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert ClusterOptions(tmp_path).fork_trials and AgentSettings().agent_fork_server  # on by default
    off = service_environment(ClusterOptions(tmp_path, fork_trials=False), tmp_path, "nats://x")
    assert off["DET_AGENT_FORK_SERVER"] == "0"  # --no-fork-trials
    options = ClusterOptions(tmp_path, fork_trials=True, preload="torch,sklearn.datasets")
    environment = service_environment(options, tmp_path, "nats://x")
    for key, value in environment.items():
        monkeypatch.setenv(key, value)
    settings = AgentSettings()
    assert settings.agent_fork_server and settings.agent_preload == "torch,sklearn.datasets"
    assert ClusterRecord.of(options).options(tmp_path) == options
