"""services/agent/containers/spec.py: what an allocation's container is, from
its config (untrusted), its placement and its environment."""

import posixpath
from typing import Any

import pytest

from services.agent.containers.spec import (
    AGENT_LABEL,
    ALLOCATION_LABEL,
    TASK_LABEL,
    TRIAL_LABEL,
    WORK_DIR_LABEL,
    Allowed,
    ContainerConfigError,
    Device,
    Mount,
    Placement,
    container_spec,
    size_in_bytes,
)

FOLDER = "/work/agent/7.1"
PROTECTED = ("/var/run/docker.sock", "/run/docker.sock", "/work/agent", "/data/cluster")
PLACE = Placement("7.1", "task-7", 7, "agent-a", "cpu", FOLDER, uid=1000, gid=1000)
ENV = {
    "DET_TRIAL_ID": "7",
    "PATH": "/agent/venv/bin:/usr/bin",
    "LD_LIBRARY_PATH": "/agent/lib",
    "PYTHONPATH": "/agent/checkout/harness",
}


def spec(config: dict[str, Any], *, place: Placement = PLACE, **kwargs: Any) -> Any:
    kwargs.setdefault("allowed", Allowed(protected_paths=PROTECTED))
    kwargs.setdefault("default_image", "default:1")
    return container_spec(config, place, ["python3", "train.py"], ENV, **kwargs)


def refused(config: dict[str, Any], **kwargs: Any) -> str:
    with pytest.raises(ContainerConfigError) as error:
        spec(config, **kwargs)
    return str(error.value)


def test_the_defaults_are_an_unprivileged_container_on_the_host_network() -> None:
    made = spec({})
    assert made.image == "default:1"
    assert made.argv == ("python3", "train.py")
    assert made.user == "1000:1000"
    assert made.working_dir == f"{FOLDER}/trial"
    assert made.network_mode == "host"
    assert made.security_opt == ("no-new-privileges",)
    assert made.cap_add == () and made.cap_drop == ()
    assert made.mounts == (Mount(FOLDER, FOLDER),)  # the allocation's folder, at the same path
    assert made.shm_size is None and made.devices == () and made.gpu_uuids == ()
    assert not made.force_pull and made.registry_auth == {}
    assert made.labels == {
        AGENT_LABEL: "agent-a",
        ALLOCATION_LABEL: "7.1",
        TASK_LABEL: "task-7",
        TRIAL_LABEL: "7",
        WORK_DIR_LABEL: "/work/agent",  # agent ids repeat across clusters, work dirs do not
    }


def test_the_environment_drops_the_agents_host_paths_and_gets_a_home() -> None:
    assert spec({}).env == {"HOME": f"{FOLDER}/trial", "DET_TRIAL_ID": "7"}


def test_a_host_path_variable_the_config_sets_is_kept() -> None:
    made = spec({"environment": {"environment_variables": ["PATH=/opt/bin"]}})
    assert made.env["PATH"] == ENV["PATH"]  # launch.py already put the configured value there
    by_type = spec({"environment": {"environment_variables": {"cpu": ["LD_LIBRARY_PATH=/x"]}}})
    assert by_type.env["LD_LIBRARY_PATH"] == ENV["LD_LIBRARY_PATH"]


def test_root_is_refused() -> None:
    root = Placement("7.1", "t", 7, "a", "cpu", FOLDER, uid=0, gid=0)
    assert "never run as root" in refused({}, place=root)


@pytest.mark.parametrize(
    ("image", "slot_type", "expected"),
    [
        ("repo/img:2", "cpu", "repo/img:2"),
        ({"cpu": "c:1", "cuda": "g:1"}, "cpu", "c:1"),
        ({"cpu": "c:1", "cuda": "g:1"}, "cuda", "g:1"),
        ({"cpu": "c:1", "gpu": "legacy-g:1"}, "cuda", "legacy-g:1"),
        ({"cpu": "c:1", "rocm": "r:1"}, "rocm", "r:1"),
        ({"cuda": "g:1"}, "cpu", "default:1"),
        (None, "cuda", "default:1"),
    ],
)
def test_the_image_by_slot_type(image: Any, slot_type: str, expected: str) -> None:
    place = Placement("7.1", "t", 7, "a", slot_type, FOLDER, 1, 1)
    assert spec({"environment": {"image": image}}, place=place).image == expected


def test_no_image_and_no_default_is_refused_naming_the_key() -> None:
    assert "environment.image" in refused({}, default_image="")
    assert "environment.image" in refused({"environment": {"image": 3}})


def test_pull_settings_pass_through() -> None:
    auth = {"username": "u", "password": "p", "email": None}
    made = spec({"environment": {"force_pull_image": True, "registry_auth": auth}})
    assert made.force_pull and made.registry_auth == {"username": "u", "password": "p"}
    assert "environment.registry_auth" in refused({"environment": {"registry_auth": "u:p"}})


def test_bind_mounts_with_their_options() -> None:
    mounts = [
        {"host_path": "/datasets/mnist", "container_path": "/data", "read_only": True},
        {"host_path": "/scratch/", "container_path": "out", "propagation": "rshared"},
    ]
    made = spec({"bind_mounts": mounts})
    assert made.mounts[1:] == (
        Mount("/datasets/mnist", "/data", read_only=True),
        Mount("/scratch", f"{FOLDER}/trial/out", propagation="rshared"),  # relative: in the working folder
    )


@pytest.mark.parametrize(
    "host_path",
    [
        "/var/run/docker.sock",
        "/var/run/docker.sock/",
        "/run",  # holds the socket
        "/",  # holds everything
        "/work/agent",  # the agent's work dir
        "/work/agent/8.1",  # another allocation's folder
        "/data/cluster/agent-secrets",
        "/data",
    ],
)
def test_protected_paths_may_not_be_mounted(host_path: str) -> None:
    message = refused({"bind_mounts": [{"host_path": host_path, "container_path": "/x"}]})
    assert message.startswith("bind_mounts[0].host_path:") and "not allowed" in message


def test_a_link_is_judged_by_what_it_reaches() -> None:
    def resolve(path: str) -> str:
        return "/var/run/docker.sock" if path == "/home/me/sock" else posixpath.normpath(path)

    mounts = [{"host_path": "/home/me/sock", "container_path": "/sock"}]
    assert "docker.sock" in refused({"bind_mounts": mounts}, resolve=resolve)


def test_the_allocations_own_folder_may_be_mounted_again() -> None:
    made = spec({"bind_mounts": [{"host_path": f"{FOLDER}/trial/data", "container_path": "/d"}]})
    assert made.mounts[-1] == Mount(f"{FOLDER}/trial/data", "/d")
    assert Mount(f"{FOLDER}/trial/data", "/d") in made.mounts


@pytest.mark.parametrize(
    ("mount", "key"),
    [
        ("/a:/b", "bind_mounts[0]: must be a mapping"),
        ({"host_path": "rel", "container_path": "/b"}, "bind_mounts[0].host_path"),
        ({"host_path": "/a"}, "bind_mounts[0].container_path"),
        ({"host_path": "/a", "container_path": "."}, "bind_mounts[0].container_path"),
        ({"host_path": "/a", "container_path": "/b", "propagation": "bogus"}, "bind_mounts[0].propagation"),
    ],
)
def test_bad_bind_mounts_are_named(mount: Any, key: str) -> None:
    assert refused({"bind_mounts": [mount]}).startswith(key)


def test_a_shared_fs_checkpoint_storage_is_mounted_at_its_path() -> None:
    storage = {"type": "shared_fs", "host_path": "/data/cluster/../checkpoints/"}
    assert spec({"checkpoint_storage": storage}).mounts[1] == Mount("/data/checkpoints", "/data/checkpoints")
    assert spec({"checkpoint_storage": {"type": "s3", "bucket": "b"}}).mounts == (Mount(FOLDER, FOLDER),)
    secrets = {"type": "shared_fs", "host_path": "/data/cluster"}
    assert refused({"checkpoint_storage": secrets}).startswith("checkpoint_storage.host_path:")


def test_capabilities_only_from_the_allowlist() -> None:
    message = refused({"environment": {"add_capabilities": ["SYS_ADMIN"]}})
    assert "environment.add_capabilities: SYS_ADMIN not allowed" in message and "allows none" in message
    allowed = Allowed(capabilities=frozenset({"SYS_PTRACE"}))
    made = spec({"environment": {"add_capabilities": ["cap_sys_ptrace"]}}, allowed=allowed)
    assert made.cap_add == ("SYS_PTRACE",)
    assert "allows SYS_PTRACE" in refused(
        {"environment": {"add_capabilities": ["NET_ADMIN"]}}, allowed=allowed
    )
    dropped = spec({"environment": {"drop_capabilities": ["CAP_NET_RAW", "chown"]}})
    assert dropped.cap_drop == ("NET_RAW", "CHOWN")
    assert "environment.drop_capabilities" in refused({"environment": {"drop_capabilities": ["a b"]}})


def test_devices_in_both_forms() -> None:
    made = spec(
        {
            "resources": {
                "devices": [
                    "/dev/fuse:/dev/fuse",
                    {"host_path": "/dev/a", "container_path": "/dev/b", "mode": "r"},
                ]
            }
        }
    )
    assert made.devices == (Device("/dev/fuse", "/dev/fuse", "rwm"), Device("/dev/a", "/dev/b", "r"))
    assert refused({"resources": {"devices": ["/dev/fuse"]}}).startswith("resources.devices[0]")
    assert refused({"resources": {"devices": ["/dev/a:/dev/b:x"]}}).startswith("resources.devices[0].mode")
    assert refused({"resources": {"devices": ["dev:/dev/b"]}}).startswith("resources.devices[0]")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        (0, 0),
        (1234, 1234),
        ("512", 512),
        ("64k", 64 * 1024),
        ("128M", 128 * 1024**2),
        ("128MB", 128 * 1024**2),
        ("4Gi", 4 * 1024**3),
        ("1.5G", int(1.5 * 1024**3)),
        ("2 GiB", 2 * 1024**3),
        ("1t", 1024**4),
    ],
)
def test_sizes(value: Any, expected: int | None) -> None:
    assert size_in_bytes(value, "resources.shm_size") == expected


@pytest.mark.parametrize("value", ["lots", "-1", -1, True, "1Q", [1]])
def test_bad_sizes_are_named(value: Any) -> None:
    with pytest.raises(ContainerConfigError, match=r"^resources\.shm_size: "):
        size_in_bytes(value, "resources.shm_size")


def test_shm_size_and_gpus() -> None:
    place = Placement("7.1", "t", 7, "a", "cuda", FOLDER, 1, 1, gpu_uuids=("GPU-a", "GPU-b"))
    made = spec({"resources": {"shm_size": "1G"}}, place=place)
    assert made.shm_size == 1024**3 and made.gpu_uuids == ("GPU-a", "GPU-b")


def test_the_harness_mounts_come_after_the_allocations_folder() -> None:
    harness = (Mount("/agent/site/determined", "/opt/h/determined", read_only=True),)
    assert spec({}, harness=harness).mounts == (Mount(FOLDER, FOLDER), *harness)
