"""What a trial process knows about itself: `det.get_cluster_info()`.

The agent hands everything over in environment variables (docs/CONTRACTS.md, "Trial
processes"), and the experiment config in the file DET_EXPERIMENT_CONFIG_FILE names;
this module reads them once. Off-cluster there are none and
`get_cluster_info()` returns None, which is how the rest of the harness decides to use
its null objects.
"""

import functools
import json
import os
from collections.abc import Mapping
from typing import Any

_REQUIRED = (
    "DET_MASTER",
    "DET_CLUSTER_ID",
    "DET_AGENT_ID",
    "DET_SLOT_IDS",
    "DET_TASK_ID",
    "DET_ALLOCATION_ID",
    "DET_SESSION_TOKEN",
    "DET_TASK_TYPE",
)


class TrialInfo:
    """The trial-specific part of ClusterInfo (`ClusterInfo.trial`)."""

    def __init__(
        self,
        *,
        trial_id: int,
        experiment_id: int,
        trial_seed: int,
        hparams: dict[str, Any],
        config: dict[str, Any],
        steps_completed: int,
        trial_run_id: int,
        searcher_length: int = 0,
    ) -> None:
        self.trial_id = trial_id
        self.experiment_id = experiment_id
        self.trial_seed = trial_seed
        self.hparams = hparams
        self._config = config
        self._steps_completed = steps_completed
        self._trial_run_id = trial_run_id
        # The searcher's current length for the trial (ASHA: its rung); 0 = searcher.max_length.
        self._searcher_length = searcher_length

    @classmethod
    def _from_env(cls, env: Mapping[str, str]) -> "TrialInfo":
        return cls(
            trial_id=int(env["DET_TRIAL_ID"]),
            experiment_id=int(env["DET_EXPERIMENT_ID"]),
            trial_seed=int(env.get("DET_TRIAL_SEED", "0")),
            hparams=json.loads(env.get("DET_HPARAMS") or "{}"),
            config=_experiment_config(env),
            steps_completed=int(env.get("DET_STEPS_COMPLETED") or "0"),
            trial_run_id=int(env.get("DET_TRIAL_RUN_ID") or "0"),
            searcher_length=int(env.get("DET_SEARCHER_LENGTH") or "0"),
        )


class ClusterInfo:
    """Facts about the task this process runs in, as the agent described them."""

    def __init__(
        self,
        *,
        master_url: str,
        cluster_id: str,
        agent_id: str,
        slot_ids: list[int],
        task_id: str,
        allocation_id: str,
        session_token: str,
        task_type: str,
        latest_checkpoint: str | None = None,
        trial_info: TrialInfo | None = None,
        container_addrs: list[str] | None = None,
        container_rank: int = 0,
        container_slot_counts: list[int] | None = None,
        gpu_uuids: list[str] | None = None,
    ) -> None:
        """The container_* fields describe the task's gang, one "container" per agent that runs
        a part of it, in placement order (the first is the chief's); they default to one
        container on this machine holding all of `slot_ids`. `gpu_uuids`: the "GPU-<uuid>" of
        this container's GPUs, the only ones it sees (none for CPU slots)."""
        self.master_url = _canonical_master_url(master_url)
        self.cluster_id = cluster_id
        self.agent_id = agent_id
        self.slot_ids = slot_ids
        self.task_id = task_id
        self.allocation_id = allocation_id
        self.session_token = session_token
        self.task_type = task_type
        self.latest_checkpoint = latest_checkpoint
        self._trial_info = trial_info
        self.container_addrs = container_addrs or ["127.0.0.1"]
        self.container_rank = container_rank
        self.container_slot_counts = container_slot_counts or [len(slot_ids)]
        self.gpu_uuids = gpu_uuids or []

    @property
    def trial(self) -> TrialInfo:
        if self._trial_info is None:
            raise RuntimeError(f"ClusterInfo.trial is only available for TRIAL tasks, not {self.task_type}")
        return self._trial_info

    @property
    def user_data(self) -> dict[str, Any]:
        """The experiment config's `data` section ({} for non-trial tasks)."""
        if self._trial_info is None:
            return {}
        return self._trial_info._config.get("data") or {}

    @classmethod
    def _from_env(cls, env: Mapping[str, str]) -> "ClusterInfo":
        missing = [name for name in _REQUIRED if name not in env]
        if missing:
            raise ValueError(f"incomplete task environment: missing {', '.join(missing)}")
        task_type = env["DET_TASK_TYPE"]
        is_trial = task_type == "TRIAL"
        return cls(
            master_url=env["DET_MASTER"],
            cluster_id=env["DET_CLUSTER_ID"],
            agent_id=env["DET_AGENT_ID"],
            slot_ids=[int(s) for s in json.loads(env["DET_SLOT_IDS"])],
            task_id=env["DET_TASK_ID"],
            allocation_id=env["DET_ALLOCATION_ID"],
            session_token=env["DET_SESSION_TOKEN"],
            task_type=task_type,
            latest_checkpoint=(env.get("DET_LATEST_CHECKPOINT") or None) if is_trial else None,
            trial_info=TrialInfo._from_env(env) if is_trial else None,
            container_addrs=[str(a) for a in json.loads(env.get("DET_CONTAINER_ADDRS") or "[]")],
            container_rank=int(env.get("DET_CONTAINER_RANK") or "0"),
            container_slot_counts=[int(n) for n in json.loads(env.get("DET_CONTAINER_SLOT_COUNTS") or "[]")],
            gpu_uuids=[str(u) for u in json.loads(env.get("DET_GPU_UUIDS") or "[]")],
        )


def _experiment_config(env: Mapping[str, str]) -> dict[str, Any]:
    """The config the agent wrote to DET_EXPERIMENT_CONFIG_FILE (it may be larger than an
    environment variable may hold), or DET_EXPERIMENT_CONFIG as test mode and older agents
    give it."""
    text = env.get("DET_EXPERIMENT_CONFIG")
    path = env.get("DET_EXPERIMENT_CONFIG_FILE")
    if not text and path:
        with open(path, encoding="utf-8") as file:
            text = file.read()
    config = json.loads(text or "{}")
    if not isinstance(config, dict):
        raise TypeError("the experiment config must be a JSON object")
    return config


def _canonical_master_url(master: str) -> str:
    master = master.rstrip("/")
    return master if "://" in master else f"http://{master}"


@functools.cache
def get_cluster_info() -> ClusterInfo | None:
    """The ClusterInfo of this task, or None when not running on a cluster.

    Cached: the environment of a task does not change while it runs.
    """
    if "DET_MASTER" not in os.environ or "DET_ALLOCATION_ID" not in os.environ:
        return None
    return ClusterInfo._from_env(os.environ)
