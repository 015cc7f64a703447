"""The slots this machine offers: one per GPU that NVML sees (named by its UUID), else CPU slots."""

import warnings

import structlog

from determined.proto import events_pb2

log = structlog.get_logger()


def detect_slots(cpu_slots: int, use_gpus: bool = True) -> list[events_pb2.Slot]:
    gpus = _cuda_slots() if use_gpus else []
    if gpus:
        return gpus
    return [events_pb2.Slot(slot_id=i, type="cpu", device=f"cpu{i}") for i in range(cpu_slots)]


def _cuda_slots() -> list[events_pb2.Slot]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # pynvml's own deprecation notice
        import pynvml
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as error:
        log.info("no_gpus", reason=str(error))
        return []
    try:
        slots = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name, uuid = _text(pynvml.nvmlDeviceGetName(handle)), _text(pynvml.nvmlDeviceGetUUID(handle))
            # slot_id is NVML's index (PCI bus order); gpu_uuid is "GPU-<uuid>", which
            # CUDA_VISIBLE_DEVICES and Docker's device requests accept (services/agent/gpus.py).
            slots.append(
                events_pb2.Slot(slot_id=index, type="cuda", device=f"{name} ({uuid})", gpu_uuid=uuid)
            )
        return slots
    finally:
        pynvml.nvmlShutdown()


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
