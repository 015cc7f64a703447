"""What an allocation's container is: pure decisions over its experiment
config, its allocation and the environment `launch.py` built for it.

The config is untrusted (any user's): the container is never privileged,
runs as the agent's trial user (never root), with no-new-privileges, gets
only the capabilities the operator allows, and may not bind-mount what
holds the cluster's secrets, the Docker socket or other allocations' work.
Each refusal is a ContainerConfigError naming the config key.

The allocation's folder is bind-mounted at the same path inside, so the
paths of the trial's environment (its config file, its fatal-error file, the
master's certificate) hold there too; the trial runs in its trial folder,
which is its HOME. The network is the host's, as Determined's distributed
training uses: the gang's workers and the master are reached at the
addresses the environment names.
"""

import posixpath
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from services.agent.launch import TRIAL_FOLDER, AgentError
from services.agent.task_launch import working_dir

# Labels every container of the agent carries: how a restarted agent finds its own.
LABEL_PREFIX = "ai.determined-es."
AGENT_LABEL = f"{LABEL_PREFIX}agent-id"
ALLOCATION_LABEL = f"{LABEL_PREFIX}allocation-id"
TASK_LABEL = f"{LABEL_PREFIX}task-id"
TRIAL_LABEL = f"{LABEL_PREFIX}trial-id"
# The agent's work dir: agent ids repeat across clusters on one host (each
# local cluster's agent is named after the host), work dirs do not.
WORK_DIR_LABEL = f"{LABEL_PREFIX}work-dir"

PROPAGATIONS = frozenset({"rprivate", "private", "rshared", "shared", "rslave", "slave"})
DEVICE_MODES = re.compile(r"^[rwm]{1,3}$")
_SIZE = re.compile(r"^([0-9]*\.?[0-9]+) ?([kmgtp]?)(i?b?)$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4, "p": 1024**5}
# The agent's variables that name its own machine's files: an image has its own.
HOST_ONLY_VARIABLES = ("PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "CUDA_VISIBLE_DEVICES")


class ContainerConfigError(AgentError):
    """The config asks for a container this agent does not run: names the key."""


@dataclass(frozen=True)
class Mount:
    host_path: str
    container_path: str
    read_only: bool = False
    propagation: str = "rprivate"


@dataclass(frozen=True)
class Device:
    host_path: str
    container_path: str
    mode: str = "rwm"


@dataclass(frozen=True)
class Allowed:
    """What the operator lets configs have: capabilities to add, and the host
    paths no bind mount may reach (the Docker socket, the cluster's data and
    secrets, the agent's work dir)."""

    capabilities: frozenset[str] = frozenset()
    protected_paths: tuple[str, ...] = ()


@dataclass(frozen=True)
class ContainerSpec:
    image: str
    argv: tuple[str, ...]
    env: Mapping[str, str]
    working_dir: str
    user: str
    labels: Mapping[str, str]
    mounts: tuple[Mount, ...] = ()
    devices: tuple[Device, ...] = ()
    cap_add: tuple[str, ...] = ()
    cap_drop: tuple[str, ...] = ()
    shm_size: int | None = None
    gpu_uuids: tuple[str, ...] = ()
    force_pull: bool = False
    # Docker's auth_config for the pull (username/password/...): the config's registry_auth.
    registry_auth: Mapping[str, str] = field(default_factory=dict)
    network_mode: str = "host"
    security_opt: tuple[str, ...] = ("no-new-privileges",)


@dataclass(frozen=True)
class Placement:
    """Which allocation, on which agent, in which folder, as whom."""

    allocation_id: str
    task_id: str
    trial_id: int
    agent_id: str
    slot_type: str
    # <work dir>/<allocation id>: mounted at the same path inside.
    folder: str
    uid: int
    gid: int
    gpu_uuids: tuple[str, ...] = ()


def container_spec(
    config: Mapping[str, Any],
    placement: Placement,
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    allowed: Allowed,
    default_image: str = "",
    harness: Sequence[Mount] = (),
    read_storages: Sequence[Any] = (),
    resolve: Callable[[str], str] = posixpath.normpath,
) -> ContainerSpec:
    """The container of one allocation. `argv` is what it runs (the
    entrypoint, wrapped as the harness bundle says); `harness`, the bundle's
    read-only mounts; `read_storages`, checkpoint storages it reads besides
    its own (a TensorBoard's trials': shared_fs ones mounted read-only);
    `resolve`, what a host path reaches (the shell passes
    os.path.realpath: a link to the Docker socket is the socket).
    ContainerConfigError: the config asks for what this agent refuses."""
    if placement.uid == 0:
        raise ContainerConfigError("trials never run as root in a container: the agent needs a trial user")
    environment = config.get("environment") or {}
    trial = posixpath.join(placement.folder, TRIAL_FOLDER)
    mounts = (
        Mount(placement.folder, placement.folder),
        *harness,
        *storage_mounts(
            config.get("checkpoint_storage"),
            read_storages,
            placement.folder,
            allowed.protected_paths,
            resolve,
        ),
        *bind_mounts(config.get("bind_mounts") or [], placement.folder, allowed.protected_paths, resolve),
    )
    resources = config.get("resources") or {}
    return ContainerSpec(
        image=image_name(environment.get("image"), placement.slot_type, default_image),
        argv=tuple(argv),
        env={
            "HOME": trial,
            **{k: v for k, v in env.items() if k not in HOST_ONLY_VARIABLES},
            **_configured(env, config),
        },
        working_dir=working_dir(config, trial),
        user=f"{placement.uid}:{placement.gid}",
        labels=labels(placement),
        mounts=mounts,
        devices=devices(resources.get("devices") or []),
        cap_add=capabilities_added(environment.get("add_capabilities") or [], allowed.capabilities),
        cap_drop=tuple(_names(environment.get("drop_capabilities") or [], "environment.drop_capabilities")),
        shm_size=size_in_bytes(resources.get("shm_size"), "resources.shm_size"),
        gpu_uuids=placement.gpu_uuids,
        force_pull=bool(environment.get("force_pull_image")),
        registry_auth=registry_auth(environment.get("registry_auth")),
    )


def labels(placement: Placement) -> dict[str, str]:
    return {
        AGENT_LABEL: placement.agent_id,
        WORK_DIR_LABEL: posixpath.dirname(placement.folder),
        ALLOCATION_LABEL: placement.allocation_id,
        TASK_LABEL: placement.task_id,
        TRIAL_LABEL: str(placement.trial_id),
    }


def _configured(env: Mapping[str, str], config: Mapping[str, Any]) -> dict[str, str]:
    """The host-only variables the config set itself (its PATH, say): those it keeps."""
    variables = (config.get("environment") or {}).get("environment_variables") or []
    if isinstance(variables, Mapping):
        variables = [item for listed in variables.values() for item in listed or []]
    named = {str(item).partition("=")[0] for item in variables}
    return {name: env[name] for name in HOST_ONLY_VARIABLES if name in named and name in env}


def image_name(image: Any, slot_type: str, default: str) -> str:
    """environment.image: a name, or a map by slot type (cpu, cuda, rocm; `gpu`
    for cuda too, as Determined reads it); the agent's default where it names none."""
    if isinstance(image, Mapping):
        keys = ("cuda", "gpu") if slot_type == "cuda" else (slot_type,)
        image = next((image[key] for key in keys if image.get(key)), None)
    if isinstance(image, str) and image.strip():
        return image.strip()
    if image is not None:
        raise ContainerConfigError(f"environment.image: {image!r} is not an image name")
    if default:
        return default
    raise ContainerConfigError(
        f"environment.image: the config names no image for {slot_type} slots and this agent has no "
        "default image (DET_AGENT_DEFAULT_IMAGE)"
    )


def bind_mounts(
    items: Sequence[Any],
    own_folder: str,
    protected: Sequence[str],
    resolve: Callable[[str], str] = posixpath.normpath,
) -> list[Mount]:
    """The config's bind_mounts, each checked against the protected paths
    (as `resolve` finds what the host path reaches)."""
    mounts = []
    for index, item in enumerate(items):
        key = f"bind_mounts[{index}]"
        if not isinstance(item, Mapping):
            raise ContainerConfigError(f"{key}: must be a mapping with host_path and container_path")
        host, inside = item.get("host_path"), item.get("container_path")
        if not isinstance(host, str) or not posixpath.isabs(host):
            raise ContainerConfigError(f"{key}.host_path: must be an absolute path, not {host!r}")
        if not isinstance(inside, str) or not inside.strip() or inside == ".":
            raise ContainerConfigError(f"{key}.container_path: must be a path, not {inside!r}")
        propagation = item.get("propagation") or "rprivate"
        if propagation not in PROPAGATIONS:
            raise ContainerConfigError(
                f"{key}.propagation: {propagation!r} is not one of {', '.join(sorted(PROPAGATIONS))}"
            )
        reached = resolve(host)
        _refuse_protected(key, reached, own_folder, protected)
        # A relative container path is under the working folder, as in Determined.
        target = posixpath.normpath(posixpath.join(own_folder, TRIAL_FOLDER, inside))
        mounts.append(Mount(reached, target, bool(item.get("read_only")), propagation))
    return mounts


def storage_mounts(
    own: Any,
    read: Sequence[Any],
    own_folder: str,
    protected: Sequence[str],
    resolve: Callable[[str], str] = posixpath.normpath,
) -> list[Mount]:
    """The allocation's own checkpoint storage (`checkpoint_mounts`), then
    those it reads, read-only; each folder once (a TensorBoard's trials
    mostly share one)."""
    mounts = checkpoint_mounts(own, own_folder, protected, resolve)
    for storage in read:
        for mount in checkpoint_mounts(storage, own_folder, protected, resolve):
            if all(mount.container_path != m.container_path for m in mounts):
                mounts.append(replace(mount, read_only=True))
    return mounts


def checkpoint_mounts(
    storage: Any,
    own_folder: str,
    protected: Sequence[str],
    resolve: Callable[[str], str] = posixpath.normpath,
) -> list[Mount]:
    """A shared_fs checkpoint storage's host_path, mounted at the same path
    (where the harness writes checkpoints), checked as a bind mount is."""
    if not isinstance(storage, Mapping) or storage.get("type") != "shared_fs":
        return []
    host = storage.get("host_path")
    if not isinstance(host, str) or not posixpath.isabs(host):
        raise ContainerConfigError(f"checkpoint_storage.host_path: must be an absolute path, not {host!r}")
    reached = resolve(host)
    _refuse_protected("checkpoint_storage", reached, own_folder, protected)
    return [Mount(reached, posixpath.normpath(host))]


def _refuse_protected(key: str, host: str, own_folder: str, protected: Sequence[str]) -> None:
    """A mount may not be, hold, or sit inside a protected path; the
    allocation's own folder (inside the agent's protected work dir) is allowed."""
    if _within(host, own_folder):
        return
    for path in protected:
        if _within(host, path) or _within(path, host):
            raise ContainerConfigError(
                f"{key}.host_path: {host} is not allowed: it reaches {path}, which trials may not mount"
            )


def _within(path: str, folder: str) -> bool:
    folder = posixpath.normpath(folder)
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def devices(items: Sequence[Any]) -> tuple[Device, ...]:
    found = []
    for index, item in enumerate(items):
        key = f"resources.devices[{index}]"
        if isinstance(item, str):
            parts = item.split(":")
            item = (
                dict(zip(("host_path", "container_path", "mode"), parts, strict=False))
                if len(parts) in (2, 3)
                else None
            )
        if not isinstance(item, Mapping):
            raise ContainerConfigError(f"{key}: must be host_path:container_path[:mode] or a mapping")
        host, inside, mode = item.get("host_path"), item.get("container_path"), item.get("mode") or "rwm"
        if not all(isinstance(p, str) and posixpath.isabs(p) for p in (host, inside)):
            raise ContainerConfigError(f"{key}: host_path and container_path must be absolute paths")
        if not isinstance(mode, str) or not DEVICE_MODES.match(mode):
            raise ContainerConfigError(f"{key}.mode: {mode!r} is not made of r, w and m")
        found.append(Device(str(host), str(inside), mode))
    return tuple(found)


def capabilities_added(names: Sequence[Any], allowed: Collection[str]) -> tuple[str, ...]:
    """environment.add_capabilities: only those the operator allows (DET_AGENT_ALLOWED_CAPABILITIES)."""
    wanted = _names(names, "environment.add_capabilities")
    refused = [name for name in wanted if name not in allowed]
    if refused:
        allows = ", ".join(sorted(allowed)) or "none"
        raise ContainerConfigError(
            f"environment.add_capabilities: {', '.join(refused)} not allowed on this agent "
            f"(DET_AGENT_ALLOWED_CAPABILITIES allows {allows})"
        )
    return tuple(wanted)


def _names(names: Sequence[Any], key: str) -> list[str]:
    """Capability names as Docker takes them: upper case, without the CAP_ prefix."""
    found = []
    for name in names:
        if not isinstance(name, str) or not re.fullmatch(r"(?i)(cap_)?[a-z_]+", name):
            raise ContainerConfigError(f"{key}: {name!r} is not a capability name")
        upper = name.upper()
        found.append(upper.removeprefix("CAP_"))
    return found


def size_in_bytes(value: Any, key: str) -> int | None:
    """A size: bytes, or a number with a unit (k, m, g, t, p; binary, with or without i/b)."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    match = _SIZE.match(value.strip()) if isinstance(value, str) else None
    if match is None:
        raise ContainerConfigError(f"{key}: {value!r} is not a size like 128M or 1.5G")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def registry_auth(auth: Any) -> dict[str, str]:
    """environment.registry_auth as Docker's auth_config (the fields it sets)."""
    if not auth:
        return {}
    if not isinstance(auth, Mapping):
        raise ContainerConfigError("environment.registry_auth: must be a mapping")
    return {str(k): str(v) for k, v in auth.items() if v is not None}
