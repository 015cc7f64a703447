"""`python -m determined.exec.tensorboard`'s command line and its refusals (the task itself
runs in tests/integration/test_tensorboard_sync.py)."""

import json
import pathlib
import re
import sys
from typing import Any

import pytest

from determined.exec import tensorboard

ENV = {"DET_TASK_HOST": "0.0.0.0", "DET_TASK_PORT": "6006", "DET_PROXY_PREFIX": "/proxy/abc/"}


def test_tensorboard_listens_where_the_agent_says_under_the_prefix(tmp_path: pathlib.Path) -> None:
    command = tensorboard.tensorboard_command(tmp_path, ENV, [])
    assert command[:3] == [sys.executable, "-m", "tensorboard.main"]
    assert set(command[3:]) >= {
        f"--logdir={tmp_path}",
        "--host=0.0.0.0",
        "--port=6006",
        "--path_prefix=/proxy/abc",
    }


def test_the_configs_tensorboard_args_come_last(tmp_path: pathlib.Path) -> None:
    config_file = tmp_path / "config.json"
    config_file.write_text(json.dumps({"tensorboard_args": ["--samples_per_plugin=images=100"]}))
    args = tensorboard.config_tensorboard_args({**ENV, "DET_TASK_CONFIG_FILE": str(config_file)})
    assert tensorboard.tensorboard_command(tmp_path, ENV, args)[-1] == "--samples_per_plugin=images=100"
    assert tensorboard.config_tensorboard_args(ENV) == []


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({**ENV, "DET_TASK_PORT": "http"}, "DET_TASK_PORT must be a port number, got 'http'"),
        ({**ENV, "DET_TASK_PORT": "70000"}, "DET_TASK_PORT must be a port number"),
        ({"DET_TASK_PORT": "1"}, "DET_TASK_HOST and DET_PROXY_PREFIX (a path) must be set"),
    ],
)
def test_a_bad_environment_is_named(env: dict[str, str], message: str, tmp_path: pathlib.Path) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        tensorboard.tensorboard_command(tmp_path, env, [])


@pytest.mark.parametrize(
    ("sources", "message"),
    [
        (None, "No such file or directory"),
        ([{"experiment_id": 1}], "source 0 needs positive integers"),
    ],
)
def test_a_missing_or_bad_sources_file_ends_it_with_why(
    sources: Any,
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: pathlib.Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("DET_TENSORBOARD_SOURCES_FILE", str(tmp_path / "sources.json"))
    if sources is not None:
        (tmp_path / "sources.json").write_text(json.dumps(sources))
    assert tensorboard.main() == 1
    assert "cannot start the TensorBoard: " in caplog.text and message in caplog.text
