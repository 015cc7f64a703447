"""The ``resources``, ``environment`` and ``bind_mounts`` sections."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, PlainValidator, model_validator

from determined.common.expconf._base import AsJson, ConfigModel, raise_problems, validate_part
from determined.common.expconf._errors import ConfigRuleError

_SHM_SIZE = re.compile(r"^([0-9]*[.])?[0-9]+ ?(([kmgtpKMGTP]([iI]?[bB])?)|[bB])?$")


def _shm_size(value: Any) -> int | str | None:
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
        return value
    if isinstance(value, str) and _SHM_SIZE.match(value):
        return value
    raise ConfigRuleError([("", "must be a number of bytes or a size like 128M or 1.5G")])


class Device(ConfigModel):
    host_path: str
    container_path: str
    mode: str = "mrw"


def _device_strings(value: Any) -> Any:
    """Read ``"/host:/container[:mode]"`` entries as Device mappings."""
    if not isinstance(value, list):
        return value
    return [_device_mapping(item) if isinstance(item, str) else item for item in value]


def _device_mapping(text: str) -> dict[str, str] | str:
    parts = text.split(":")
    if len(parts) not in (2, 3):
        return text  # left for pydantic to reject as "must be a mapping"
    return dict(zip(("host_path", "container_path", "mode"), parts, strict=False))


# The fields experiments' and tasks' resources share (tasks: _task.py).
Weight = Annotated[float, Field(ge=0)]
Priority = Annotated[int, Field(ge=1, le=99)]
ShmSize = Annotated[int | str | None, PlainValidator(_shm_size)]
Devices = Annotated[list[Device], BeforeValidator(_device_strings)]


class Resources(ConfigModel):
    slots_per_trial: Annotated[int, Field(ge=0)] = 1
    max_slots: Annotated[int, Field(ge=0)] | None = None
    weight: Weight = 1.0
    priority: Priority | None = None
    resource_pool: str = ""
    shm_size: ShmSize = None
    devices: Devices = Field(default_factory=list)
    is_single_node: bool | None = None
    native_parallel: bool = False
    agent_label: str | None = None
    slots: Any = Field(default=None, exclude=True)

    @model_validator(mode="after")
    def _no_slots(self) -> Resources:
        if "slots" in self.model_fields_set:
            raise_problems([("slots", "is not allowed for experiments (use slots_per_trial)")])
        return self


class ImageByDevice(ConfigModel):
    cpu: str | None = None
    cuda: str | None = None
    rocm: str | None = None
    gpu: str | None = None


class VariablesByDevice(ConfigModel):
    cpu: list[str] = Field(default_factory=list)
    cuda: list[str] = Field(default_factory=list)
    rocm: list[str] = Field(default_factory=list)
    gpu: list[str] = Field(default_factory=list)


def _image(value: Any) -> str | ImageByDevice | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, dict):
        return validate_part(ImageByDevice, value)
    raise ConfigRuleError([("", "must be an image name or a mapping of cpu/cuda/rocm to image names")])


def _variables(value: Any) -> list[str] | VariablesByDevice:
    if isinstance(value, dict):
        return validate_part(VariablesByDevice, value)
    if isinstance(value, list) and all(isinstance(item, str) and "=" in item for item in value):
        return value
    raise ConfigRuleError(
        [("", "must be a list of NAME=VALUE strings or a mapping of cpu/cuda/rocm to such lists")]
    )


class RegistryAuth(ConfigModel):
    username: str | None = None
    password: str | None = None
    auth: str | None = None
    email: str | None = None
    serveraddress: str | None = None
    identitytoken: str | None = None
    registrytoken: str | None = None


class ProxyPort(ConfigModel):
    proxy_port: Annotated[int, Field(ge=1, le=65535)]
    proxy_tcp: bool = False
    unauthenticated: bool = False
    default_service_id: bool = False


class Environment(ConfigModel):
    image: Annotated[str | ImageByDevice | None, PlainValidator(_image), AsJson] = None
    environment_variables: Annotated[list[str] | VariablesByDevice, PlainValidator(_variables), AsJson] = (
        Field(default_factory=list)
    )
    force_pull_image: bool = False
    registry_auth: RegistryAuth | None = None
    add_capabilities: list[str] = Field(default_factory=list)
    drop_capabilities: list[str] = Field(default_factory=list)
    proxy_ports: list[ProxyPort] = Field(default_factory=list)
    ports: dict[str, int] | None = None
    pod_spec: dict[str, Any] | None = None


class BindMount(ConfigModel):
    host_path: str
    container_path: str
    read_only: bool = False
    propagation: str = "rprivate"

    @model_validator(mode="after")
    def _paths(self) -> BindMount:
        problems = []
        if not self.host_path.startswith("/"):
            problems.append(("host_path", "must be an absolute path"))
        if self.container_path == ".":
            problems.append(("container_path", 'must not be "."'))
        raise_problems(problems)
        return self
