"""`determined.pytorch.deepspeed`: not supported by determined-es.

Each of Determined's public names is here, so that imports work; using one raises
NotImplementedError that points at `det.pytorch.PyTorchTrial` (distributed through
torch.distributed) or the Core API.
"""

from determined._unsupported import unsupported

_ALTERNATIVE = (
    "use det.pytorch.PyTorchTrial (multi-slot training runs it with torch.distributed), "
    "or call DeepSpeed yourself from a Core API script (det.core.init)"
)


def _deepspeed(name: str) -> type:
    return unsupported(__name__, name, "DeepSpeed", _ALTERNATIVE)


DeepSpeedTrial = _deepspeed("DeepSpeedTrial")
DeepSpeedTrialContext = _deepspeed("DeepSpeedTrialContext")
DeepSpeedTrialController = _deepspeed("DeepSpeedTrialController")
ModelParallelUnit = _deepspeed("ModelParallelUnit")
make_data_parallel_mpu = _deepspeed("make_data_parallel_mpu")
make_deepspeed_mpu = _deepspeed("make_deepspeed_mpu")
overwrite_deepspeed_config = _deepspeed("overwrite_deepspeed_config")
get_ds_config_from_hparams = _deepspeed("get_ds_config_from_hparams")
init = _deepspeed("init")
Trainer = _deepspeed("Trainer")

__all__ = [
    "DeepSpeedTrial",
    "DeepSpeedTrialContext",
    "DeepSpeedTrialController",
    "ModelParallelUnit",
    "Trainer",
    "get_ds_config_from_hparams",
    "init",
    "make_data_parallel_mpu",
    "make_deepspeed_mpu",
    "overwrite_deepspeed_config",
]
