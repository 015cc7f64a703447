"""Where a trial's TensorBoard files are in its checkpoint storage:
`tensorboard/experiment/<experiment id>/trial/<trial id>/` beside the checkpoints (Determined's
layout without its cluster id), whatever the storage's type."""

from determined.common.storage import StorageManager

ROOT = "tensorboard/experiment"


def trial_folder(experiment_id: int, trial_id: int) -> str:
    """The trial's folder, relative to the storage's root."""
    return f"{ROOT}/{experiment_id}/trial/{trial_id}"


def trial_storage(storage: StorageManager, experiment_id: int) -> StorageManager:
    """The experiment's trial folders, each handled as a checkpoint named by its trial id."""
    return storage.within(f"{ROOT}/{experiment_id}/trial")


def experiment_storage(storage: StorageManager) -> StorageManager:
    """Every experiment's folder, each handled as a checkpoint named by its experiment id (its
    files are `trial/<trial id>/...`): one listing finds the files of all of its trials."""
    return storage.within(ROOT)
