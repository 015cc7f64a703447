"""`determined.pytorch.experimental` (batch inference): not supported by determined-es.

Each of Determined's public names is here, so that imports work; using one raises
NotImplementedError that points at the Core API.
"""

from determined._unsupported import unsupported

_ALTERNATIVE = (
    "write the inference loop in a Core API script (det.core.init): shard the data by "
    "core_context.distributed.rank and keep progress with core_context.checkpoint"
)


def _batch_inference(name: str) -> type:
    return unsupported(__name__, name, "batch inference", _ALTERNATIVE)


TorchBatchProcessor = _batch_inference("TorchBatchProcessor")
TorchBatchProcessorContext = _batch_inference("TorchBatchProcessorContext")
get_default_device = _batch_inference("get_default_device")
torch_batch_process = _batch_inference("torch_batch_process")

__all__ = ["TorchBatchProcessor", "TorchBatchProcessorContext", "get_default_device", "torch_batch_process"]
