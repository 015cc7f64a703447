"""Checkpoint storage backends: one interface for the harness (store, upload,
download) and the checkpoint service (delete).

A checkpoint is the folder `<root>/<storage_id>` holding the user's files and
`metadata.json`, whatever the backend. `build(config)` gives the manager for a
`checkpoint_storage` section (the dict form the cluster stores)."""

from determined.common.storage._base import DeleteResult, StorageError, StorageManager, build

__all__ = ["DeleteResult", "StorageError", "StorageManager", "build"]
