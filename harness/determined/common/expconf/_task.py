"""The configuration of a notebook, TensorBoard, command or shell (Determined's
job configuration): the experiment's environment and bind mounts, its own
resources (``slots``, not ``slots_per_trial``), and what only tasks have.

Public API::

    load_task_config(text_or_mapping, task_type) -> TaskConfig
    TaskConfig.to_json_dict() -> dict        (the stored, fully defaulted form)
    duration_seconds("1h30m") -> float       (idle_timeout's form: Go durations)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Field, PlainValidator, ValidationError, ValidationInfo, model_validator

from determined.common.expconf._base import ConfigModel, raise_problems
from determined.common.expconf._errors import ConfigRuleError, InvalidConfigError, messages_from
from determined.common.expconf._limits import check_config_value
from determined.common.expconf._resources import (
    BindMount,
    Devices,
    Environment,
    Priority,
    ShmSize,
    Weight,
)
from determined.common.expconf._yaml import parse_yaml
from determined.common.states import TaskType

# Slots a task asks for unless its config says: a TensorBoard needs none (it
# still lands on an agent), the other kinds one.
DEFAULT_SLOTS = {TaskType.NOTEBOOK: 1, TaskType.TENSORBOARD: 0, TaskType.COMMAND: 1, TaskType.SHELL: 1}

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_DURATION = re.compile(rf"(?:{_DURATION_PART.pattern})+")


def duration_seconds(text: str) -> float:
    """A duration as Go writes it ("30s", "10m", "1h30m", "1.5h") in seconds;
    ValueError for anything else."""
    if not _DURATION.fullmatch(text):
        raise ValueError(f"{text!r} is not a duration")
    return sum(float(number) * _UNITS[unit] for number, unit in _DURATION_PART.findall(text))


def _idle_timeout(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str) and _DURATION.fullmatch(value) and duration_seconds(value) > 0:
        return value
    raise ConfigRuleError([("", 'must be a duration above 0 such as "30s", "10m" or "1h30m"')])


def _entrypoint(value: Any) -> str | list[str] | None:
    if value is None or (isinstance(value, str) and value.strip()):
        return value
    if isinstance(value, list) and value and all(isinstance(item, str) for item in value):
        return value
    raise ConfigRuleError([("", "must be a command string or a non-empty list of strings")])


class TaskResources(ConfigModel):
    # None only before load_task_config fills the task type's default (DEFAULT_SLOTS).
    slots: Annotated[int, Field(ge=0)] | None = None
    weight: Weight = 1.0
    priority: Priority | None = None
    resource_pool: str = ""
    shm_size: ShmSize = None
    devices: Devices = Field(default_factory=list)


class TaskConfig(ConfigModel):
    """A validated task configuration; ``to_json_dict()`` is the stored form."""

    description: str | None = None
    environment: Environment = Field(default_factory=Environment)
    resources: TaskResources = Field(default_factory=TaskResources)
    bind_mounts: list[BindMount] = Field(default_factory=list)
    work_dir: str | None = None
    debug: bool = False
    # Notebooks and TensorBoards: stopped once idle this long (None: never).
    idle_timeout: Annotated[str | None, PlainValidator(_idle_timeout)] = None
    # Notebooks: what counts as activity (Determined's three kinds).
    notebook_idle_type: Literal["kernels_or_terminals", "kernel_connections", "activity"] = (
        "kernels_or_terminals"
    )
    # Commands: what to run when the command line gives nothing.
    entrypoint: Annotated[str | list[str] | None, PlainValidator(_entrypoint)] = None
    # TensorBoards: more arguments for `tensorboard`.
    tensorboard_args: list[str] = Field(default_factory=list)
    # HPC launchers' sections: accepted and ignored, as in experiments.
    slurm: dict[str, Any] = Field(default_factory=dict)
    pbs: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _default_slots(cls, data: Any, info: ValidationInfo) -> Any:
        """The task type's slots where the config names none."""
        task_type = (info.context or {}).get("task_type")
        if not isinstance(data, dict) or task_type not in DEFAULT_SLOTS:
            return data
        resources = data.get("resources")
        if resources is None:
            return {**data, "resources": {"slots": DEFAULT_SLOTS[task_type]}}
        if isinstance(resources, dict) and resources.get("slots") is None:
            return {**data, "resources": {**resources, "slots": DEFAULT_SLOTS[task_type]}}
        return data

    @model_validator(mode="after")
    def _per_kind(self, info: ValidationInfo) -> TaskConfig:
        task_type = (info.context or {}).get("task_type")
        problems: list[tuple[str, str]] = []
        if self.idle_timeout is not None and task_type not in (TaskType.NOTEBOOK, TaskType.TENSORBOARD, None):
            problems.append(("idle_timeout", "is for notebooks and TensorBoards only"))
        if self.entrypoint is not None and task_type not in (TaskType.COMMAND, None):
            problems.append(("entrypoint", "is for commands only (the command line's arguments)"))
        if self.tensorboard_args and task_type not in (TaskType.TENSORBOARD, None):
            problems.append(("tensorboard_args", "is for TensorBoards only"))
        problems.extend(
            ("tensorboard_args", why) for why in _tensorboard_args_problems(self.tensorboard_args)
        )
        raise_problems(problems)
        return self

    @property
    def slots(self) -> int:
        return self.resources.slots or 0

    @property
    def idle_timeout_s(self) -> float | None:
        return None if self.idle_timeout is None else duration_seconds(self.idle_timeout)

    def to_json_dict(self) -> dict[str, Any]:
        """The fully defaulted, JSON-able form that is stored and read by the agent."""
        return self.model_dump(mode="json")


# The flags of `tensorboard` that the task sets itself (where it listens, what it serves).
TENSORBOARD_FLAGS_SET_BY_TASK = (
    "--logdir",
    "--logdir_spec",
    "--host",
    "--bind_all",
    "--port",
    "--path_prefix",
)


def _tensorboard_args_problems(args: list[str]) -> list[str]:
    """Flags in tensorboard_args that would move where TensorBoard listens or what it reads."""
    return [
        f"{arg!r} is set by the TensorBoard task itself"
        for arg in args
        if arg.split("=", 1)[0] in TENSORBOARD_FLAGS_SET_BY_TASK
    ]


def load_task_config(source: str | bytes | Mapping[str, Any], task_type: str) -> TaskConfig:
    """Validates a task's configuration (YAML/JSON text, "" for the defaults,
    or a parsed mapping) for `task_type` (a TaskType). Raises
    InvalidConfigError listing every problem, or naming the limit the config
    goes past (checked before it is expanded or validated)."""
    if task_type not in DEFAULT_SLOTS:
        raise InvalidConfigError([f"unknown task type {task_type!r}: one of {', '.join(TaskType)}"])
    if isinstance(source, str | bytes):
        data = parse_yaml(source)
    else:
        check_config_value(source)
        data = source
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        kind = type(data).__name__
        raise InvalidConfigError([f"the task configuration must be a mapping of fields, not a {kind}"])
    try:
        return TaskConfig.model_validate(dict(data), context={"task_type": task_type})
    except ValidationError as exc:
        raise InvalidConfigError(list(dict.fromkeys(messages_from(exc, TaskConfig)))) from None
