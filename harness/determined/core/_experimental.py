"""`core_context.experimental`: Determined's experimental Core API calls. A trial that uses a
checkpoint (batch inference on a trained model, say) says so, and the checkpoint's
`get_metrics()` in the SDK then lists what that trial reports."""

import logging
from typing import Any, Protocol

from determined._client import TrialClient

logger = logging.getLogger("determined.core")


class _HasCheckpoint(Protocol):
    @property
    def uuid(self) -> str: ...


class ExperimentalCoreContext:
    def __init__(self, client: TrialClient, trial_id: int) -> None:
        self._client = client
        self._trial_id = trial_id

    def report_task_using_checkpoint(self, checkpoint: _HasCheckpoint) -> None:
        """Records that this trial uses `checkpoint` (an SDK Checkpoint, or anything with its
        `uuid`): its metrics then show in that checkpoint's `get_metrics()`."""
        self._client.report_checkpoint_use(self._trial_id, checkpoint.uuid)

    def report_task_using_model_version(self, model_version: Any) -> None:
        """Records that this trial uses the model version's checkpoint (as above)."""
        self.report_task_using_checkpoint(model_version.checkpoint)


class DummyExperimentalCoreContext(ExperimentalCoreContext):
    """Off a cluster: nothing to record it in; logged instead."""

    def __init__(self) -> None:
        pass

    def report_task_using_checkpoint(self, checkpoint: _HasCheckpoint) -> None:
        logger.info("report_task_using_checkpoint(%s)", checkpoint.uuid)
