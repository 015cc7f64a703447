"""`determined.pytorch.lightning`: not supported by determined-es.

`LightningAdapter` is here, so that imports work; using it raises NotImplementedError that
points at `det.pytorch.PyTorchTrial` or the Core API.
"""

from determined._unsupported import unsupported

LightningAdapter = unsupported(
    __name__,
    "LightningAdapter",
    "PyTorch Lightning",
    "port the LightningModule's steps to a det.pytorch.PyTorchTrial, or run the Lightning "
    "Trainer in a Core API script (det.core.init) that reports metrics and checkpoints itself",
)

__all__ = ["LightningAdapter"]
