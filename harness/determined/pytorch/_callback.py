"""`PyTorchCallback`: hooks into the Trainer's loop, from `PyTorchTrial.build_callbacks()`."""

from typing import Any


class PyTorchCallback:
    """Override the hooks you need; the others do nothing.

    A callback with state to survive a pause and resume returns it from `state_dict()`; the
    Trainer checkpoints it under the callback's name in `build_callbacks()` and hands it back
    to `load_state_dict()` on restore.
    """

    def on_trial_startup(self, first_batch_idx: int, checkpoint_uuid: str | None) -> None:
        """Before any training or validation; `first_batch_idx` is the batch training resumes
        at (0 for a fresh trial) and `checkpoint_uuid` the checkpoint it resumes from."""

    def on_trial_shutdown(self) -> None:
        """After training ends for this process, whether by finishing, preemption or an error
        in the user's code (then only when the trial had started up)."""

    def on_training_start(self) -> None:
        """Before the first training batch (after any checkpoint is restored)."""

    def on_training_epoch_start(self, epoch_idx: int) -> None:
        """Before the first batch of each training epoch."""

    def on_training_epoch_end(self, epoch_idx: int) -> None:
        """After the last batch of each training epoch."""

    def on_training_workload_end(self, avg_metrics: dict[str, Any], batch_metrics: Any) -> None:
        """After each reporting period, with its averaged and per-batch training metrics."""

    def on_validation_start(self) -> None:
        """Before each validation."""

    def on_validation_end(self, metrics: dict[str, Any]) -> None:
        """After each validation, with its reduced metrics (the same on every worker)."""

    def on_checkpoint_load_start(self, checkpoint: dict[str, Any]) -> None:
        """When restoring, with the loaded state (`state_dict.pth`) before it is applied."""

    def on_checkpoint_save_start(self, checkpoint: dict[str, Any]) -> None:
        """Before the state is written; entries added to `checkpoint` are saved with it."""

    def on_checkpoint_write_end(self, checkpoint_dir: str) -> None:
        """After the checkpoint's files are written to `checkpoint_dir`, before upload."""

    def on_checkpoint_upload_end(self, uuid: str) -> None:
        """After the checkpoint is stored and reported as `uuid`."""

    def state_dict(self) -> dict[str, Any]:
        """This callback's state, saved in each checkpoint."""
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the state `state_dict()` returned."""
