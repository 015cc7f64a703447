"""A trial's TensorBoard folder as its `core_context.train` handles it (`tensorboard_mode`).

AUTO (the chief): the reported training and validation metrics are written as scalars into
an event file of the folder, and the folder is uploaded after each report and when the core
context closes. MANUAL: nothing is written, and only
`upload_tensorboard_files()` uploads. Where the folder is in the storage already (shared_fs,
directory: the trial writes there in place) there is nothing to upload."""

import pathlib
from collections.abc import Mapping
from typing import Any

from determined.tensorboard._events import EventFileWriter
from determined.tensorboard._scalars import scalars
from determined.tensorboard._upload import Mangler, Selector, Uploader, every_file, same_name

# The groups written as scalars in AUTO mode (as Determined writes them).
WRITTEN_GROUPS = ("training", "validation")


class TrialTensorboard:
    def __init__(self, folder: pathlib.Path, *, auto: bool, uploader: Uploader | None = None) -> None:
        self.folder = folder
        self.auto = auto
        self._uploader = uploader
        self._writer: EventFileWriter | None = None

    def path(self) -> pathlib.Path:
        """The folder, created on demand."""
        self.folder.mkdir(parents=True, exist_ok=True)
        return self.folder

    def reported(
        self,
        group: str,
        steps_completed: int,
        metrics: Mapping[str, Any],
        batch_metrics: list[dict[str, Any]] | None = None,
    ) -> None:
        """After the chief reported metrics: in AUTO mode, write them and upload."""
        if not self.auto or group not in WRITTEN_GROUPS:
            return
        if self._writer is None:
            self._writer = EventFileWriter(self.path())
        for step, values in _steps(group, steps_completed, metrics, batch_metrics):
            for tag, value in values.items():
                self._writer.add_scalar(tag, value, step)
        self._writer.flush()
        if self._uploader is not None:
            self._uploader.request()

    def upload(self, selector: Selector = every_file, mangler: Mangler = same_name) -> None:
        """`upload_tensorboard_files()`: MANUAL mode only, as in Determined."""
        if self.auto:
            raise RuntimeError("upload_tensorboard_files can only be used in MANUAL mode")
        if self._uploader is not None:
            self._uploader.request(selector, mangler)

    def close(self) -> None:
        """Close the writer, upload what is left (AUTO), and wait for the uploads."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._uploader is not None:
            if self.auto:
                self._uploader.request()
            self._uploader.close()


def _steps(
    group: str, steps_completed: int, metrics: Mapping[str, Any], batch_metrics: list[dict[str, Any]] | None
) -> list[tuple[int, dict[str, float]]]:
    """The scalars to write at each step: a training report's batch metrics each at its own
    batch (the last at `steps_completed`), and the report's metrics that no batch has at
    `steps_completed` (Determined's rule: batch values rather than their mean)."""
    batches = batch_metrics or []
    first = steps_completed - len(batches) + 1
    written = [(first + index, scalars(group, batch)) for index, batch in enumerate(batches)]
    seen = {tag for _, values in written for tag in values}
    rest = {tag: value for tag, value in scalars(group, metrics).items() if tag not in seen}
    return [*written, (steps_completed, rest)]
