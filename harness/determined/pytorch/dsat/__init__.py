"""`determined.pytorch.dsat` (DeepSpeed Autotune): not supported by determined-es.

Each of Determined's public names is here, so that imports work; using one raises
NotImplementedError that points at the searchers determined-es has.
"""

from determined._unsupported import unsupported

_ALTERNATIVE = (
    "tune the batch size and DeepSpeed settings as hyperparameters with one of the experiment "
    "searchers (random, grid, adaptive_asha)"
)


def _dsat(name: str) -> type:
    return unsupported(__name__, name, "DeepSpeed Autotune", _ALTERNATIVE)


dsat_reporting_context = _dsat("dsat_reporting_context")
get_ds_config_from_hparams = _dsat("get_ds_config_from_hparams")
get_hf_args_with_overwrites = _dsat("get_hf_args_with_overwrites")
BaseDSATSearchMethod = _dsat("BaseDSATSearchMethod")
DSATTrial = _dsat("DSATTrial")
DSATTrialTracker = _dsat("DSATTrialTracker")
DSATModelProfileInfoTrial = _dsat("DSATModelProfileInfoTrial")
RandomDSATSearchMethod = _dsat("RandomDSATSearchMethod")
BinarySearchDSATSearchMethod = _dsat("BinarySearchDSATSearchMethod")
ASHADSATSearchMethod = _dsat("ASHADSATSearchMethod")

__all__ = [
    "ASHADSATSearchMethod",
    "BaseDSATSearchMethod",
    "BinarySearchDSATSearchMethod",
    "DSATModelProfileInfoTrial",
    "DSATTrial",
    "DSATTrialTracker",
    "RandomDSATSearchMethod",
    "dsat_reporting_context",
    "get_ds_config_from_hparams",
    "get_hf_args_with_overwrites",
]
