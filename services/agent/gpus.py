"""Which GPUs an allocation's part sees on this agent: exactly those of its
slots. Pure.

A container gets its slots' GPUs as device requests by UUID
(`allocation_gpu_uuids`); a process trial gets them in CUDA_VISIBLE_DEVICES
(`gpu_variables`), by UUID, or, for a registration from before slots carried
their UUID, by NVML index with CUDA_DEVICE_ORDER=PCI_BUS_ID (NVML numbers
GPUs in PCI bus order; CUDA by default fastest first). Inside, the trial's
GPUs are numbered from 0, so a worker's `cuda:<local rank>` is its own GPU.
A part without a CUDA slot (a CPU agent's, or a zero-slot allocation) sees
no GPU.
"""

import json
from collections.abc import Sequence

from determined.proto import events_pb2

CUDA = "cuda"


def allocation_gpu_uuids(slot_ids: Sequence[int], agent_slots: Sequence[events_pb2.Slot]) -> list[str]:
    """The "GPU-<uuid>" of each CUDA slot among `slot_ids` whose UUID the
    agent registered, in the order of `slot_ids`."""
    by_id = {slot.slot_id: slot for slot in agent_slots}
    slots = [by_id[slot_id] for slot_id in slot_ids if slot_id in by_id]
    return [slot.gpu_uuid for slot in slots if slot.type == CUDA and slot.gpu_uuid]


def gpu_variables(slot_ids: Sequence[int], agent_slots: Sequence[events_pb2.Slot]) -> dict[str, str]:
    """CUDA_VISIBLE_DEVICES (and CUDA_DEVICE_ORDER when it lists indices) for
    a process trial of these slots, and DET_GPU_UUIDS (a JSON list, for
    `det.get_cluster_info().gpu_uuids`)."""
    by_id = {slot.slot_id: slot for slot in agent_slots}
    cuda_ids = [slot_id for slot_id in slot_ids if slot_id in by_id and by_id[slot_id].type == CUDA]
    uuids = allocation_gpu_uuids(cuda_ids, agent_slots)
    variables = {"DET_GPU_UUIDS": json.dumps(uuids)}
    if len(uuids) == len(cuda_ids):
        variables["CUDA_VISIBLE_DEVICES"] = ",".join(uuids)
    else:
        variables["CUDA_VISIBLE_DEVICES"] = ",".join(str(slot_id) for slot_id in cuda_ids)
        variables["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    return variables
