"""Training metrics between two reports, and TensorBoard scalars.

`train_batch` returns a loss tensor or a dict of metrics for every batch. They are kept as
they are (tensors stay on their device, detached) and turned into numbers only when a period
is reported, so that training never waits for the device between reports.
"""

import numbers
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

import torch

from determined import tensorboard


class TrainingMetrics:
    """The outputs of `train_batch` since the last report."""

    def __init__(self) -> None:
        self._batches: list[dict[str, Any]] = []

    def add(self, output: Any) -> None:
        """One batch's output (hot path: no device sync)."""
        if isinstance(output, torch.Tensor):
            self._batches.append({"loss": output.detach()})
        elif isinstance(output, dict):
            self._batches.append(
                {name: v.detach() if isinstance(v, torch.Tensor) else v for name, v in output.items()}
            )
        else:
            raise TypeError(
                f"train_batch must return a loss tensor or a dict of metrics, got {type(output).__name__}"
            )

    def __len__(self) -> int:
        return len(self._batches)

    def take(self) -> list[dict[str, Any]]:
        """The period's batches as numbers (one transfer per device), and a fresh period."""
        batches, self._batches = self._batches, []
        by_device: dict[torch.device, list[tuple[dict[str, Any], str, torch.Tensor]]] = defaultdict(list)
        for batch in batches:
            for name, value in batch.items():
                if isinstance(value, torch.Tensor):
                    if value.numel() != 1:
                        raise ValueError(
                            f"training metric {name!r} is a tensor of shape {tuple(value.shape)}: "
                            "train_batch must return scalars"
                        )
                    by_device[value.device].append((batch, name, value))
        for found in by_device.values():
            numbers_ = torch.stack([t.reshape(()).to(torch.float64) for _, _, t in found]).tolist()
            for (batch, name, _), number in zip(found, numbers_, strict=True):
                batch[name] = number
        return batches


def average(batches: list[dict[str, Any]]) -> dict[str, Any]:
    """Each metric's mean over the batches that have it; a metric that is not a number takes
    its last value."""
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    others: dict[str, Any] = {}
    for batch in batches:
        for name, value in batch.items():
            if isinstance(value, numbers.Real) and not isinstance(value, bool):
                sums[name] = sums.get(name, 0.0) + float(value)
                counts[name] = counts.get(name, 0) + 1
            else:
                others[name] = value
    return {**others, **{name: sums[name] / counts[name] for name in sums}}


def write_scalars(
    writer: tensorboard.ScalarWriter, group: str, steps_completed: int, metrics: Mapping[str, Any]
) -> None:
    """Every finite number of `metrics` (a one-element tensor counts) as a scalar at `steps_completed`."""
    numbers_ = {
        name: value.item() if isinstance(value, torch.Tensor) and value.numel() == 1 else value
        for name, value in metrics.items()
    }
    tensorboard.write_scalars(writer, group, steps_completed, numbers_)
