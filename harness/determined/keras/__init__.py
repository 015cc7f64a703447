"""`determined.keras`: not supported by determined-es.

Each of Determined's public names is here, so that imports work; using one raises
NotImplementedError that points at `det.pytorch` or the Core API. Importing this module
loads neither TensorFlow nor torch.
"""

from determined._unsupported import unsupported

_ALTERNATIVE = (
    "train with det.pytorch.PyTorchTrial, or run Keras in a Core API script (det.core.init) "
    "that reports metrics and checkpoints itself"
)


def _keras(name: str) -> type:
    return unsupported(__name__, name, "Keras", _ALTERNATIVE)


TFKerasTrial = _keras("TFKerasTrial")
TFKerasTrialContext = _keras("TFKerasTrialContext")
TFKerasExperimentalContext = _keras("TFKerasExperimentalContext")
TFKerasTrialController = _keras("TFKerasTrialController")
TFKerasTensorBoard = _keras("TFKerasTensorBoard")
SequenceAdapter = _keras("SequenceAdapter")
InputData = _keras("InputData")
ArrayLike = _keras("ArrayLike")
DeterminedCallback = _keras("DeterminedCallback")
TensorBoard = _keras("TensorBoard")
load_model_from_checkpoint_path = _keras("load_model_from_checkpoint_path")

__all__ = [
    "ArrayLike",
    "DeterminedCallback",
    "InputData",
    "SequenceAdapter",
    "TFKerasExperimentalContext",
    "TFKerasTensorBoard",
    "TFKerasTrial",
    "TFKerasTrialContext",
    "TFKerasTrialController",
    "TensorBoard",
    "load_model_from_checkpoint_path",
]
