"""The task config (expconf._task): Determined's job configuration keys, the
defaults each kind gets, and clear refusals naming the key."""

import pytest

from determined.common.expconf import InvalidConfigError, duration_seconds, load_task_config
from determined.common.expconf._limits import MAX_CONFIG_BYTES

KINDS = ("NOTEBOOK", "TENSORBOARD", "COMMAND", "SHELL")


def errors(text: str, task_type: str = "NOTEBOOK") -> list[str]:
    with pytest.raises(InvalidConfigError) as raised:
        load_task_config(text, task_type)
    return raised.value.errors


@pytest.mark.parametrize(
    ("task_type", "slots"), [("NOTEBOOK", 1), ("TENSORBOARD", 0), ("COMMAND", 1), ("SHELL", 1)]
)
def test_the_defaults_of_each_kind(task_type: str, slots: int) -> None:
    config = load_task_config("", task_type)
    stored = config.to_json_dict()
    assert config.slots == slots == stored["resources"]["slots"]
    assert (stored["idle_timeout"], stored["notebook_idle_type"], stored["debug"], stored["work_dir"]) == (
        None,
        "kernels_or_terminals",
        False,
        None,
    )
    assert stored["resources"]["weight"] == 1.0 and stored["bind_mounts"] == []


def test_every_key_determined_has() -> None:
    config = load_task_config(
        """
description: my notebook
environment:
  image: {cpu: img:cpu, cuda: img:cuda}
  environment_variables: [A=1]
  pod_spec: {metadata: {labels: {a: b}}}
resources: {slots: 2, resource_pool: gpu, priority: 10, weight: 2, shm_size: 1G, devices: ["/dev/a:/dev/a"]}
bind_mounts: [{host_path: /data, container_path: /data, read_only: true}]
work_dir: /data
debug: true
idle_timeout: 1h30m
notebook_idle_type: activity
""",
        "NOTEBOOK",
    )
    stored = config.to_json_dict()
    assert (stored["description"], stored["resources"]["slots"], stored["resources"]["priority"]) == (
        "my notebook",
        2,
        10,
    )
    assert stored["environment"]["image"] == {"cpu": "img:cpu", "cuda": "img:cuda", "rocm": None, "gpu": None}
    assert stored["resources"]["devices"] == [
        {"host_path": "/dev/a", "container_path": "/dev/a", "mode": "mrw"}
    ]
    assert stored["bind_mounts"][0]["read_only"] is True
    assert (config.idle_timeout_s, stored["notebook_idle_type"], stored["work_dir"]) == (
        5400.0,
        "activity",
        "/data",
    )


def test_a_command_takes_an_entrypoint_and_a_tensorboard_its_arguments() -> None:
    assert load_task_config("entrypoint: [python, x.py]", "COMMAND").entrypoint == ["python", "x.py"]
    assert load_task_config(
        "tensorboard_args: [--samples_per_plugin=images=100]", "TENSORBOARD"
    ).tensorboard_args
    assert load_task_config("idle_timeout: 5m", "TENSORBOARD").idle_timeout_s == 300.0


@pytest.mark.parametrize(
    ("text", "task_type", "expected"),
    [
        ("foo: 1", "NOTEBOOK", 'unknown field "foo" at top level'),
        ("resources: {slots_per_trial: 2}", "COMMAND", 'unknown field "slots_per_trial" in resources'),
        ("resources: {slots: -1}", "COMMAND", "resources.slots: must be at least 0"),
        ("resources: {priority: 100}", "SHELL", "resources.priority: must be at most 99"),
        ("resources: {shm_size: lots}", "SHELL", "resources.shm_size: must be a number of bytes or a size like 128M or 1.5G"),
        ("idle_timeout: 10", "NOTEBOOK", 'idle_timeout: must be a duration above 0 such as "30s", "10m" or "1h30m"'),
        ("idle_timeout: 0s", "NOTEBOOK", 'idle_timeout: must be a duration above 0 such as "30s", "10m" or "1h30m"'),
        ("idle_timeout: 10 minutes", "NOTEBOOK", 'idle_timeout: must be a duration above 0 such as "30s", "10m" or "1h30m"'),
        ("idle_timeout: 10m", "COMMAND", "idle_timeout: is for notebooks and TensorBoards only"),
        ("entrypoint: ls", "NOTEBOOK", "entrypoint: is for commands only (the command line's arguments)"),
        ("entrypoint: []", "COMMAND", "entrypoint: must be a command string or a non-empty list of strings"),
        ("tensorboard_args: [-x]", "SHELL", "tensorboard_args: is for TensorBoards only"),
        ("tensorboard_args: [--port=7000]", "TENSORBOARD", "tensorboard_args: '--port=7000' is set by the TensorBoard task itself"),
        ("tensorboard_args: [--logdir, /x]", "TENSORBOARD", "tensorboard_args: '--logdir' is set by the TensorBoard task itself"),
        ("notebook_idle_type: never", "NOTEBOOK", 'notebook_idle_type: must be one of "kernels_or_terminals", "kernel_connections" or "activity" (got "never")'),
        ("bind_mounts: [{host_path: data, container_path: /d}]", "SHELL", "bind_mounts[0].host_path: must be an absolute path"),
        ("[1, 2]", "COMMAND", "the task configuration must be a mapping of fields, not a list"),
        ("a: [", "COMMAND", "invalid YAML at line 1, column 5: expected the node content, but found '<stream end>'"),
    ],
)  # fmt: skip
def test_bad_configs_are_refused_naming_the_key(text: str, task_type: str, expected: str) -> None:
    assert expected in errors(text, task_type)


def test_every_problem_is_told_at_once() -> None:
    assert len(errors("foo: 1\nresources: {slots: -1}\nidle_timeout: x")) == 3


def test_the_size_limit_is_checked_before_parsing() -> None:
    [message] = errors("a" * (MAX_CONFIG_BYTES + 1))
    assert "at most" in message and str(MAX_CONFIG_BYTES) in message


def test_an_unknown_kind_is_refused() -> None:
    assert errors("", "TRIAL") == ["unknown task type 'TRIAL': one of NOTEBOOK, TENSORBOARD, COMMAND, SHELL"]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30s", 30.0), ("10m", 600.0), ("1h30m", 5400.0), ("1.5h", 5400.0), ("250ms", 0.25), ("2h0m1s", 7201.0)],
)
def test_durations_read_as_go_writes_them(text: str, seconds: float) -> None:
    assert duration_seconds(text) == seconds


@pytest.mark.parametrize("text", ["", "10", "m", "-1s", "1d", "1 h", "1h 30m"])
def test_what_is_no_duration(text: str) -> None:
    with pytest.raises(ValueError):
        duration_seconds(text)


@pytest.mark.parametrize("task_type", KINDS)
def test_a_stored_config_loads_again_unchanged(task_type: str) -> None:
    stored = load_task_config("description: d", task_type).to_json_dict()
    assert load_task_config(stored, task_type).to_json_dict() == stored
