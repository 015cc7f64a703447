"""The ``checkpoint_storage`` section: one model for every storage type,
with the fields each type accepts checked after parsing."""

from __future__ import annotations

import posixpath
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from determined.common.expconf._base import ConfigModel, raise_problems

StorageType = Literal["shared_fs", "directory", "s3", "gcs", "azure"]
_GC = ("type", "save_experiment_best", "save_trial_best", "save_trial_latest")
FIELDS_BY_STORAGE: dict[str, tuple[str, ...]] = {
    "shared_fs": _GC + (
        "host_path", "storage_path", "propagation", "container_path", "checkpoint_path", "tensorboard_path",
    ),
    "directory": _GC + ("container_path",),
    "s3": _GC + ("bucket", "access_key", "secret_key", "prefix", "endpoint_url"),
    "gcs": _GC + ("bucket", "prefix"),
    "azure": _GC + ("container", "connection_string", "credential", "account_url"),
}  # fmt: skip
_REQUIRED = {"directory": "container_path", "s3": "bucket", "gcs": "bucket", "azure": "container"}

Keep = Annotated[int, Field(ge=0)]


class CheckpointStorage(ConfigModel):
    # None: a section giving only the GC policy (`save_*`), which the cluster's default
    # storage completes (Determined merges the master's storage before its completeness check).
    type: StorageType | None = None
    save_experiment_best: Keep = 0
    save_trial_best: Keep = 1
    save_trial_latest: Keep = 1
    host_path: str | None = None
    storage_path: str | None = None
    propagation: str = "rprivate"
    container_path: str | None = None
    checkpoint_path: str | None = None
    tensorboard_path: str | None = None
    bucket: str | None = None
    access_key: str | None = None
    secret_key: str | None = None
    prefix: str | None = None
    endpoint_url: str | None = None
    container: str | None = None
    connection_string: str | None = None
    credential: str | None = None
    account_url: str | None = None

    @model_validator(mode="after")
    def _type_rules(self) -> CheckpointStorage:
        if self.type is None:
            raise_problems(
                [
                    (field, "needs the storage's type (without one, only the GC policy save_* may be given)")
                    for field in sorted(self.model_fields_set - set(_GC))
                ]
            )
            return self
        problems = [
            (field, f"is not a field of {self.type} checkpoint storage")
            for field in sorted(self.model_fields_set - set(self.accepted_fields))
        ]
        required = _REQUIRED.get(self.type)
        if required and getattr(self, required) is None:
            problems.append((required, "is required"))
        if self.type == "shared_fs":
            problems += self._shared_fs_problems()
        if self.connection_string is not None and self.credential is not None:
            problems.append(("", "use either connection_string or credential, not both"))
        raise_problems(problems)
        return self

    def _shared_fs_problems(self) -> list[tuple[str, str]]:
        problems: list[tuple[str, str]] = []
        if self.host_path is not None and not self.host_path.startswith("/"):
            problems.append(("host_path", "must be an absolute path"))
        if self.storage_path is not None and posixpath.isabs(self.storage_path):
            inside = self.host_path is not None and _is_within(self.storage_path, self.host_path)
            if not inside:
                problems.append(
                    ("storage_path", "must either be a relative directory or a subdirectory of host_path")
                )
        return problems

    @property
    def accepted_fields(self) -> tuple[str, ...]:
        return _GC if self.type is None else FIELDS_BY_STORAGE[self.type]

    def to_json(self) -> dict[str, Any]:
        return {field: getattr(self, field) for field in self.accepted_fields}


def _is_within(path: str, folder: str) -> bool:
    path, folder = posixpath.normpath(path), posixpath.normpath(folder)
    return path == folder or path.startswith(folder.rstrip("/") + "/")
