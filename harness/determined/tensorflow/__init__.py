"""`determined.tensorflow`: not supported by determined-es.

Each of Determined's public names is here, so that imports work; using one raises
NotImplementedError that points at `det.pytorch` or the Core API. Importing this module
loads neither TensorFlow nor torch.
"""

from determined._unsupported import unsupported

_ALTERNATIVE = (
    "train with det.pytorch.PyTorchTrial, or run TensorFlow in a Core API script (det.core.init) "
    "that reports metrics and checkpoints itself"
)


def _tensorflow(name: str) -> type:
    return unsupported(__name__, name, "TensorFlow", _ALTERNATIVE)


load_model = _tensorflow("load_model")
get_tensorboard_callback = _tensorflow("get_tensorboard_callback")

__all__ = ["get_tensorboard_callback", "load_model"]
