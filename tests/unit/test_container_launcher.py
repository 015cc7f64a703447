"""services/agent/containers/launcher.py: who a container runs as, and which GPUs it gets."""

from determined.proto import events_pb2 as ev
from services.agent.containers.launcher import NOBODY, container_user, gpu_device_ids
from services.agent.launch import AgentIdentity
from services.common.os_users import OsUser


def identity(*slots: ev.Slot) -> AgentIdentity:
    return AgentIdentity("a", "c", "m:1", "/bin", slots=slots)


def test_the_trial_user_first_then_the_agents_own_then_nobody() -> None:
    trial = OsUser("determined-trial", 990, 990, frozenset())
    assert container_user(trial, 0) == trial
    assert container_user(None, 1234).uid == 1234
    root_agent = container_user(None, 0)
    assert (root_agent.uid, root_agent.gid) == (NOBODY, NOBODY)


def test_gpus_by_uuid_or_by_index_for_an_older_registration() -> None:
    four = [ev.Slot(slot_id=i, type="cuda", gpu_uuid=f"GPU-{i}") for i in range(4)]
    assert gpu_device_ids([2, 0], identity(*four), "cuda") == ("GPU-2", "GPU-0")
    old = [ev.Slot(slot_id=i, type="cuda") for i in range(4)]
    assert gpu_device_ids([1, 3], identity(*old), "cuda") == ("1", "3")
    cpu = [ev.Slot(slot_id=i, type="cpu") for i in range(2)]
    assert gpu_device_ids([0, 1], identity(*cpu), "cpu") == ()
