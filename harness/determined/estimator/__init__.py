"""`determined.estimator` (TensorFlow Estimator): not supported by determined-es.

Each of Determined's public names is here, so that imports work; using one raises
NotImplementedError that points at `det.pytorch` or the Core API. Importing this module
loads neither TensorFlow nor torch.
"""

from determined._unsupported import unsupported

_ALTERNATIVE = (
    "train with det.pytorch.PyTorchTrial, or run the Estimator in a Core API script "
    "(det.core.init) that reports metrics and checkpoints itself"
)


def _estimator(name: str) -> type:
    return unsupported(__name__, name, "TensorFlow Estimator", _ALTERNATIVE)


EstimatorTrial = _estimator("EstimatorTrial")
EstimatorTrialContext = _estimator("EstimatorTrialContext")
EstimatorExperimentalContext = _estimator("EstimatorExperimentalContext")
EstimatorTrialController = _estimator("EstimatorTrialController")
EstimatorContext = _estimator("EstimatorContext")
EstimatorNativeContext = _estimator("EstimatorNativeContext")
ServingInputReceiverFn = _estimator("ServingInputReceiverFn")
MetricReducer = _estimator("MetricReducer")
RunHook = _estimator("RunHook")
init = _estimator("init")
load_estimator_from_checkpoint_path = _estimator("load_estimator_from_checkpoint_path")

__all__ = [
    "EstimatorContext",
    "EstimatorExperimentalContext",
    "EstimatorNativeContext",
    "EstimatorTrial",
    "EstimatorTrialContext",
    "EstimatorTrialController",
    "MetricReducer",
    "RunHook",
    "ServingInputReceiverFn",
    "init",
    "load_estimator_from_checkpoint_path",
]
