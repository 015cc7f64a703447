"""What a config asks that the cluster's agents cannot give is said, naming the key: at `det
experiment create` (services/gateway/features/experiments/commands.py, from the pool's agents'
runtimes) and at the top of the trial's log (services/agent/notices.py)."""

import json
from typing import Any

import pytest

from determined.common import expconf
from services.agent.notices import runtime_notices
from services.common.trial_runtime import CONTAINER_KEYS, ELSEWHERE_KEYS, runtime_of
from services.gateway.features.experiments.commands import runtime_warnings

PLAIN = {"entrypoint": "python3 train.py", "searcher": {"name": "single", "metric": "loss"}}
HINT = "(cluster-up --runtime docker runs them in containers)"
ON_PROCESSES = f"the agents of pool 'default' run trials as processes {HINT}"


def stored(**sections: Any) -> dict[str, Any]:
    """The stored (fully defaulted) form of the plain config with `sections` added."""
    config = expconf.load_config(json.dumps({**PLAIN, **sections}))
    return config.to_json_dict()


EVERY_CONTAINER_KEY = stored(
    environment={
        "image": "team/train:1.2",
        "force_pull_image": True,
        "registry_auth": {"username": "u", "password": "p"},
        "add_capabilities": ["SYS_PTRACE"],
        "drop_capabilities": ["NET_RAW"],
    },
    bind_mounts=[{"host_path": "/data", "container_path": "/data", "read_only": True}],
    resources={"shm_size": "2G", "devices": ["/dev/fuse:/dev/fuse"]},
)


def warned(config: dict[str, Any], runtimes: set[str] | None, pool: str = "default") -> list[str]:
    return runtime_warnings(json.dumps(config), pool, runtimes)


def test_a_plain_config_gets_no_warning_on_any_pool() -> None:
    for runtimes in ({"process"}, {"docker"}, {"process", "docker"}, set(), None):
        assert warned(stored(), runtimes) == []
    assert runtime_notices(stored(), "process") == runtime_notices(stored(), "docker") == []


def test_each_container_key_on_a_process_pool_is_named_once() -> None:
    assert warned(EVERY_CONTAINER_KEY, {"process"}) == [
        f"environment.image 'team/train:1.2' is not used: {ON_PROCESSES}",
        f"environment.force_pull_image is not used: {ON_PROCESSES}",
        f"environment.registry_auth is not used: {ON_PROCESSES}",
        f"environment.add_capabilities is not used: {ON_PROCESSES}",
        f"environment.drop_capabilities is not used: {ON_PROCESSES}",
        f"bind_mounts is not used: {ON_PROCESSES}",
        f"resources.shm_size is not used: {ON_PROCESSES}",
        f"resources.devices is not used: {ON_PROCESSES}",
    ]
    assert len(CONTAINER_KEYS) == 8


@pytest.mark.parametrize(
    "runtimes",
    [{"docker"}, {"process", "docker"}, set(), None],
    ids=["a docker pool", "a mixed pool", "a pool without agents", "read models down"],
)
def test_container_keys_are_not_warned_about_where_a_container_may_run_them(
    runtimes: set[str] | None,
) -> None:
    assert warned(EVERY_CONTAINER_KEY, runtimes) == []


def test_an_image_map_names_each_image_and_the_pool_is_the_configs() -> None:
    config = stored(
        environment={"image": {"cpu": "team/cpu:1", "cuda": "team/cuda:1"}},
        resources={"resource_pool": "gpu"},
    )
    assert warned(config, {"process"}, pool="gpu") == [
        "environment.image (cpu: 'team/cpu:1', cuda: 'team/cuda:1') is not used: the agents of pool 'gpu' run "
        f"trials as processes {HINT}"
    ]


def test_defaults_and_empty_values_are_not_keys_that_are_set() -> None:
    config = stored(
        environment={"image": None, "force_pull_image": False, "add_capabilities": [], "pod_spec": {}},
        bind_mounts=[],
        resources={"devices": []},
        slurm={},
    )
    assert warned(config, {"process"}) == []


@pytest.mark.parametrize("runtimes", [{"process"}, {"docker"}, set(), None])
def test_keys_only_another_kind_of_cluster_honours_are_named_whatever_the_runtime(
    runtimes: set[str] | None,
) -> None:
    config = stored(
        environment={"pod_spec": {"spec": {"priorityClassName": "high"}}},
        slurm={"sbatch_args": ["--time=1:00"]},
        pbs={"pbsbatch_args": ["-l walltime=1:00"]},
    )
    assert warned(config, runtimes) == [
        "environment.pod_spec is not used: only Determined on Kubernetes honours it",
        "slurm is not used: only Determined on a Slurm cluster honours it",
        "pbs is not used: only Determined on a PBS cluster honours it",
    ]
    assert list(ELSEWHERE_KEYS) == ["environment.pod_spec", "slurm", "pbs"]


def test_a_process_agent_notes_what_it_ignores_at_the_top_of_the_trials_log() -> None:
    config = stored(environment={"image": "team/train:1.2", "pod_spec": {"a": 1}}, resources={"shm_size": 10})
    this_agent = f"this agent runs trials as processes {HINT}"
    elsewhere = "environment.pod_spec is not used: only Determined on Kubernetes honours it"
    expected = [
        f"environment.image 'team/train:1.2' is not used: {this_agent}",
        f"resources.shm_size is not used: {this_agent}",
        elsewhere,
    ]
    assert runtime_notices(config, "process") == expected
    assert runtime_notices(config, "") == expected  # an agent that says nothing runs processes
    assert runtime_notices(config, "docker") == [elsewhere]


def test_an_agent_that_registered_no_runtime_ran_processes() -> None:
    assert (runtime_of(""), runtime_of("process"), runtime_of("docker")) == ("process", "process", "docker")
