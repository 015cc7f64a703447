"""Each allocation's part sees exactly its slots' GPUs (services/agent/gpus.py), the
trial's environment says so, and `det.get_cluster_info().gpu_uuids` reads it back."""

import json
from pathlib import Path

import pytest

from determined._info import ClusterInfo
from determined.proto import events_pb2 as ev
from services.agent.core import AgentAllocation
from services.agent.gpus import allocation_gpu_uuids, gpu_variables
from services.agent.launch import AgentIdentity, trial_environment

UUIDS = [f"GPU-{n}{n}{n}{n}aaaa-0000-1111-2222-33334444555{n}" for n in range(4)]
FOUR_GPUS = [
    ev.Slot(slot_id=n, type="cuda", device=f"NVIDIA H100 ({uuid})", gpu_uuid=uuid)
    for n, uuid in enumerate(UUIDS)
]
# Registered before slots carried their UUID.
FOUR_OLD_GPUS = [ev.Slot(slot_id=n, type="cuda", device=f"NVIDIA H100 ({UUIDS[n]})") for n in range(4)]
TWO_CPUS = [ev.Slot(slot_id=n, type="cpu", device=f"cpu{n}") for n in range(2)]


@pytest.mark.parametrize(
    ("slot_ids", "visible"),
    [
        ([2], [UUIDS[2]]),
        ([1, 3], [UUIDS[1], UUIDS[3]]),
        ([3, 0], [UUIDS[3], UUIDS[0]]),  # in the allocation's order: cuda:0 is its first slot's GPU
        ([0, 1, 2, 3], UUIDS),
    ],
)
def test_a_part_of_a_four_gpu_agent_sees_exactly_its_slots_gpus(
    slot_ids: list[int], visible: list[str]
) -> None:
    assert allocation_gpu_uuids(slot_ids, FOUR_GPUS) == visible
    assert gpu_variables(slot_ids, FOUR_GPUS) == {
        "CUDA_VISIBLE_DEVICES": ",".join(visible),
        "DET_GPU_UUIDS": json.dumps(visible),
    }


def test_one_slot_trials_on_one_agent_see_one_different_gpu_each() -> None:
    seen = [gpu_variables([slot], FOUR_GPUS[:2])["CUDA_VISIBLE_DEVICES"] for slot in (0, 1)]
    assert seen == UUIDS[:2]


def test_without_registered_uuids_gpus_are_named_by_their_nvml_index_in_pci_bus_order() -> None:
    assert allocation_gpu_uuids([1, 3], FOUR_OLD_GPUS) == []
    assert gpu_variables([1, 3], FOUR_OLD_GPUS) == {
        "CUDA_VISIBLE_DEVICES": "1,3",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "DET_GPU_UUIDS": "[]",
    }


@pytest.mark.parametrize(
    ("slot_ids", "agent_slots"),
    [([0, 1], TWO_CPUS), ([], FOUR_GPUS), ([], TWO_CPUS)],
    ids=["a CPU agent", "a zero-slot allocation on a GPU agent", "a zero-slot allocation on a CPU agent"],
)
def test_a_part_without_a_cuda_slot_sees_no_gpu(slot_ids: list[int], agent_slots: list[ev.Slot]) -> None:
    assert allocation_gpu_uuids(slot_ids, agent_slots) == []
    assert gpu_variables(slot_ids, agent_slots) == {"CUDA_VISIBLE_DEVICES": "", "DET_GPU_UUIDS": "[]"}


def test_a_slot_the_agent_did_not_register_gives_no_gpu() -> None:
    assert allocation_gpu_uuids([1, 7], FOUR_GPUS) == [UUIDS[1]]
    assert gpu_variables([1, 7], FOUR_GPUS)["CUDA_VISIBLE_DEVICES"] == UUIDS[1]


def gang_part(agent_id: str, slot_ids: list[int], rank: int) -> AgentAllocation:
    """Agent `agent_id`'s part of a 4-slot allocation on two agents (b then a, two slots each)."""
    request = ev.AllocationRequested(
        allocation_id="5.1", task_id="5", task_type="TRIAL", slots=4, trial=ev.TrialLaunch(trial_id=5)
    )
    return AgentAllocation(
        request,
        agent_id,
        tuple(slot_ids),
        container_rank=rank,
        container_addrs=("10.0.0.2", "10.0.0.1"),
        container_slot_counts=(2, 2),
    )


def environment(
    allocation: AgentAllocation, slots: list[ev.Slot], inherited: dict[str, str]
) -> dict[str, str]:
    identity = AgentIdentity(allocation.agent_id, "c", "gw:8080", "/venv/bin", slots=tuple(slots))
    return trial_environment(
        allocation, identity, session_token="t", slot_type="cuda", inherited=inherited, folder=Path("/w/5.1")
    )


def cluster_info(env: dict[str, str]) -> ClusterInfo:
    """What the trial's `det.get_cluster_info()` reads (its config inline: no folder here)."""
    return ClusterInfo._from_env({**env, "DET_EXPERIMENT_CONFIG": "{}"})


def test_each_agent_of_a_gang_gives_its_workers_only_its_own_part_of_the_gpus() -> None:
    # The agent's own CUDA_VISIBLE_DEVICES (all of its GPUs) is not what a trial sees.
    inherited = {"CUDA_VISIBLE_DEVICES": ",".join(UUIDS), "NCCL_DEBUG": "INFO"}
    chief = environment(gang_part("b", [0, 2], 0), FOUR_GPUS, inherited)
    other = environment(gang_part("a", [1, 3], 1), FOUR_GPUS, inherited)
    assert chief["CUDA_VISIBLE_DEVICES"] == f"{UUIDS[0]},{UUIDS[2]}"
    assert other["CUDA_VISIBLE_DEVICES"] == f"{UUIDS[1]},{UUIDS[3]}"
    assert other["NCCL_DEBUG"] == "INFO" and "CUDA_DEVICE_ORDER" not in other

    info = cluster_info(other)
    assert (info.slot_ids, info.gpu_uuids, info.container_rank) == ([1, 3], [UUIDS[1], UUIDS[3]], 1)


def test_a_config_cannot_widen_what_the_trial_sees() -> None:
    allocation = gang_part("a", [1], 1)
    config = {"environment": {"environment_variables": ["CUDA_VISIBLE_DEVICES=0,1,2,3"]}}
    allocation.requested.trial.config_json = json.dumps(config)
    assert environment(allocation, FOUR_GPUS, {})["CUDA_VISIBLE_DEVICES"] == UUIDS[1]


def test_a_cpu_agents_trial_sees_no_gpu_and_no_uuids() -> None:
    env = environment(gang_part("a", [0, 1], 1), TWO_CPUS, {})
    assert env["CUDA_VISIBLE_DEVICES"] == ""
    assert cluster_info(env).gpu_uuids == []


def test_cluster_info_without_gpu_uuids_from_an_older_agent_has_none() -> None:
    env = environment(gang_part("a", [0], 1), TWO_CPUS, {})
    del env["DET_GPU_UUIDS"]
    assert cluster_info(env).gpu_uuids == []
