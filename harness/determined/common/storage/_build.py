"""`build(section)`: the manager for a `checkpoint_storage` section. The cloud backends
import their library here, so that a trial whose library is missing fails at its start,
with the package to install, rather than at its first checkpoint."""

import pathlib
from collections.abc import Mapping
from typing import Any

from determined.common.storage._base import StorageManager
from determined.common.storage._local import LocalStorageManager
from determined.common.storage._object_store import ObjectStorageManager

STORAGE_TYPES = ("shared_fs", "directory", "s3", "gcs", "azure")


def build(config: Mapping[str, Any]) -> StorageManager:
    """The manager for a `checkpoint_storage` section (its `type` picks the backend).
    ValueError naming the field for a bad section; ImportError naming the package to
    install for a backend whose library is missing (gcs, azure)."""
    kind = config.get("type")
    if kind == "shared_fs":
        host_path = _required(config, "host_path")
        storage_path = config.get("storage_path")
        # An absolute storage_path is a folder inside host_path; joining keeps it as it is.
        return LocalStorageManager(
            pathlib.Path(host_path) / storage_path if storage_path else pathlib.Path(host_path)
        )
    if kind == "directory":
        return LocalStorageManager(pathlib.Path(_required(config, "container_path")))
    if kind == "s3":
        from determined.common.storage._s3 import S3Store

        s3 = S3Store(
            _required(config, "bucket"),
            endpoint_url=config.get("endpoint_url"),
            access_key=config.get("access_key"),
            secret_key=config.get("secret_key"),
        )
        return ObjectStorageManager(s3, config.get("prefix"))
    if kind == "gcs":
        from determined.common.storage._gcs import GcsStore

        return ObjectStorageManager(GcsStore(_required(config, "bucket")), config.get("prefix"))
    if kind == "azure":
        from determined.common.storage._azure import AzureStore

        if config.get("connection_string") and config.get("credential"):
            raise ValueError("checkpoint_storage: use either connection_string or credential, not both")
        if not config.get("connection_string") and not config.get("account_url"):
            raise ValueError(
                "checkpoint_storage.account_url is required for azure storage without a connection_string"
            )
        azure = AzureStore(
            _required(config, "container"),
            connection_string=config.get("connection_string"),
            account_url=config.get("account_url"),
            credential=config.get("credential"),
        )
        return ObjectStorageManager(azure)
    raise ValueError(f"checkpoint_storage.type must be one of {', '.join(STORAGE_TYPES)}, got {kind!r}")


def section_from_string(text: str) -> dict[str, Any]:
    """The section a `det.core.init(checkpoint_storage=...)` string stands for: `s3://bucket/prefix`,
    `gs://bucket/prefix`, or a local folder (shared_fs)."""
    scheme, found, rest = text.partition("://")
    if not found:
        return {"type": "shared_fs", "host_path": str(pathlib.Path(text).expanduser().absolute())}
    bucket, _, prefix = rest.partition("/")
    kinds = {"s3": "s3", "gs": "gcs"}
    if scheme not in kinds or not bucket:
        raise ValueError(
            f"checkpoint storage {text!r}: use a folder, s3://BUCKET[/PREFIX] or gs://BUCKET[/PREFIX]"
        )
    return {"type": kinds[scheme], "bucket": bucket, "prefix": prefix or None}


def _required(config: Mapping[str, Any], name: str) -> str:
    value = config.get(name)
    if not value:
        raise ValueError(f"checkpoint_storage.{name} is required for {config.get('type')} storage")
    return str(value)
