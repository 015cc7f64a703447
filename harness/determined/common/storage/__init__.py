"""Checkpoint storage backends: one interface for the harness (store, upload,
download) and the checkpoint service (delete).

A checkpoint is the folder `<root>/<storage_id>` holding the user's files and
`metadata.json`, whatever the backend: a folder under a shared file system
(`shared_fs`, `directory`), or the objects under `<prefix>/<storage_id>/` of a
bucket (`s3`, `gcs`) or container (`azure`). `build(config)` gives the manager for
a `checkpoint_storage` section (the dict form the cluster stores). Importing this
package imports no cloud library: `build` imports the one a section needs."""

from determined.common.storage._base import DeleteResult, Selector, StorageError, StorageManager
from determined.common.storage._build import STORAGE_TYPES, build, section_from_string
from determined.common.storage._local import LocalStorageManager
from determined.common.storage._paths import (
    UnsafeCheckpointFileError,
    check_relpath,
    check_storage_id,
    glob_matcher,
    local_resources,
    open_checkpoint_file,
)

__all__ = [
    "STORAGE_TYPES",
    "DeleteResult",
    "LocalStorageManager",
    "Selector",
    "StorageError",
    "StorageManager",
    "UnsafeCheckpointFileError",
    "build",
    "check_relpath",
    "check_storage_id",
    "glob_matcher",
    "local_resources",
    "open_checkpoint_file",
    "section_from_string",
]
