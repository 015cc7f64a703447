"""How a legacy `model_def:Trial` entrypoint reaches `determined.exec.harness`: the
shared entrypoint rules, the agent's command, the torch launcher's `--trial`, the
seed-era lengths, and the local test mode's command. No torch here."""

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from determined.cli._test_mode import local_entrypoint, rewrite_for_test_mode
from determined.common import expconf
from determined.common.entrypoint import is_legacy_trial, launch_entrypoint
from determined.common.expconf import Length
from determined.common.expconf._lengths import to_nearest_batches
from determined.launch import parse_args
from services.agent.launch import entrypoint_argv, forkable_argv

LAUNCHED = "python3 -m determined.launch.torch_distributed -- --trial"


@pytest.mark.parametrize(
    "entrypoint", ["model_def:MNistTrial", "pkg.mod:Outer.Inner", " model_def:MyTrial\n", "a1_b.c_2:T_3"]
)
def test_trial_class_entrypoints(entrypoint: str) -> None:
    assert is_legacy_trial(entrypoint)
    assert launch_entrypoint(entrypoint) == f"{LAUNCHED} {entrypoint.strip()}"


@pytest.mark.parametrize(
    "entrypoint",
    [
        "python3 train.py",
        "m:",
        ":C",
        "m.:C",
        "m:C.",
        "m:.C",
        "m::C",
        "m:C x",
        "é:C",
        ["model_def:MyTrial"],
        None,
    ],
)
def test_other_entrypoints_run_as_written(entrypoint: Any) -> None:
    assert not is_legacy_trial(entrypoint)
    assert launch_entrypoint(entrypoint) == entrypoint


def test_the_config_and_the_agent_agree_on_the_command() -> None:
    raw = {"entrypoint": "pkg.model_def:Outer.MyTrial", "searcher": {"name": "single", "metric": "loss"}}
    config = expconf.load_config(raw)
    assert config.is_legacy_trial
    assert config.launch_entrypoint() == f"{LAUNCHED} pkg.model_def:Outer.MyTrial"
    assert entrypoint_argv(raw, startup_hook=False) == ["sh", "-c", config.launch_entrypoint()]
    assert entrypoint_argv(raw, startup_hook=True)[-3:] == ["sh", "-c", config.launch_entrypoint()]


def test_a_trial_class_never_takes_the_fork_servers_fast_path() -> None:
    assert forkable_argv({"entrypoint": "model_def:MyTrial"}, startup_hook=False, slot_type="cpu") is None
    assert forkable_argv({"entrypoint": "python3 train.py"}, startup_hook=False, slot_type="cpu") == [
        "train.py"
    ]


def test_the_launcher_turns_trial_into_the_harness() -> None:
    harness = [sys.executable, "-m", "determined.exec.harness"]
    assert parse_args(["--", "--trial", "model_def:MyTrial"], "x") == ([], [*harness, "model_def:MyTrial"])
    assert parse_args(["--nproc_per_node", "1", "--", "--trial", "m:A.B"], "x") == (
        ["--nproc_per_node", "1"],
        [*harness, "m:A.B"],
    )
    assert parse_args(["--trial", "m:C"], "x") == ([], [*harness, "m:C"])


def test_the_launcher_refuses_trial_and_a_script_together(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--", "--trial", "m:C", "python3", "train.py"], "x")
    assert "either --trial m:C or a script" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("length", "gbs", "records_per_epoch", "expected"),
    [
        (7, None, 0, Length(batches=7)),
        (Length(batches=7), 32, 1000, Length(batches=7)),
        (Length(records=100), 32, 0, Length(batches=3)),  # truncated, as Determined's master did
        (Length(records=100), None, 0, Length(records=100)),
        (Length(epochs=2), 32, 1000, Length(batches=62)),
        (Length(epochs=2), 32, 0, Length(epochs=2)),  # the trainer counts the loader's epochs
        (Length(epochs=2), None, 1000, Length(epochs=2)),
    ],
)
def test_lengths_in_batches_where_the_config_says_how(
    length: Length | int, gbs: int | None, records_per_epoch: int, expected: Length
) -> None:
    assert to_nearest_batches(length, global_batch_size=gbs, records_per_epoch=records_per_epoch) == expected


def test_local_test_mode_runs_a_trial_class_through_the_harness(tmp_path: Path) -> None:
    raw = {
        "entrypoint": "model_def:MyTrial",
        "hyperparameters": {"global_batch_size": 8, "lr": {"type": "double", "minval": 0.1, "maxval": 0.3}},
        "searcher": {"name": "random", "metric": "loss", "max_trials": 4, "max_length": {"epochs": 3}},
    }
    config = expconf.load_config(rewrite_for_test_mode(raw))

    command = local_entrypoint(config, tmp_path)

    config_file = tmp_path / "config.json"
    assert command == [
        sys.executable, "-m", "determined.exec.harness", "--test-mode", "--config", str(config_file),
        "model_def:MyTrial",
    ]  # fmt: skip
    written = json.loads(config_file.read_text())
    assert written["searcher"]["max_length"] == {"batches": 1}
    assert written["hyperparameters"]["lr"] == {"type": "const", "val": 0.2}


def test_local_test_mode_runs_a_script_as_written(tmp_path: Path) -> None:
    raw = {"entrypoint": "python3 train.py", "searcher": {"name": "single", "metric": "loss"}}
    assert local_entrypoint(expconf.load_config(raw), tmp_path) == "python3 train.py"
    assert not (tmp_path / "config.json").exists()
