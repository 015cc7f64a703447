"""`det deploy local build-images`: the cluster image and the trial environment images,
built from this checkout (or, installed without one, the released package) through the
Docker daemon, with no network inside the build.

    determined-es/cluster:<version>     services, agent, CLI, nats-server, PostgreSQL (no torch)
    determined-es/trial:cpu-<version>   Python 3.11, torch 2.13.0 CPU, the harness
    determined-es/trial:cuda-<version>  CUDA runtime, torch 2.13.0 from PyPI, the harness
                                        (skipped where its base image cannot be had)

pip makes the wheels on the host (`pip wheel`, which finds torch in $PIP_FIND_LINKS or
/opt/wheels where it is kept locally); each image's build folder gets hard links to the ones
it installs: wheels/deps (a layer Docker reuses while they do not change) and wheels/own.
The Dockerfiles start FROM public base names; make-base-image.sh makes the Python one
locally where no registry answers.
"""

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import docker

HERE = Path(__file__).parent
PACKAGE = "determined-es"
REPOSITORY = "determined-es"
LOCAL_WHEELS = Path("/opt/wheels")


class BuildError(Exception):
    """Printed for the user: which image, and the daemon's or pip's words."""


@dataclass(frozen=True)
class ImageSpec:
    """One image: its Dockerfile, the extra of the package it installs, its base."""

    kind: str
    dockerfile: str
    extra: str
    base: str

    def name(self, version: str) -> str:
        return (
            f"{REPOSITORY}/cluster:{version}"
            if self.kind == "cluster"
            else f"{REPOSITORY}/trial:{self.kind}-{version}"
        )


CLUSTER = ImageSpec("cluster", "cluster.Dockerfile", "", "python:3.11-slim-bookworm")
TRIAL_CPU = ImageSpec("cpu", "trial-cpu.Dockerfile", "torch", "python:3.11-slim-bookworm")
TRIAL_CUDA = ImageSpec(
    "cuda", "trial-cuda.Dockerfile", "torch", "nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04"
)
IMAGES = (CLUSTER, TRIAL_CPU, TRIAL_CUDA)


@dataclass(frozen=True)
class Built:
    name: str
    size_bytes: int
    # Why it was not built ("": it was).
    skipped: str = ""


def version() -> str:
    return metadata.version(PACKAGE)


def image_name(kind: str) -> str:
    """The name of this version's image of `kind` (cluster, cpu or cuda)."""
    return next(spec for spec in IMAGES if spec.kind == kind).name(version())


def default_work_dir() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "determined-es" / "images"


def checkout() -> Path | None:
    """The checkout this package runs from (an editable install), else None."""
    root = HERE.parents[1]
    return root if (root / "pyproject.toml").exists() and (root / "harness" / "determined").is_dir() else None


def requirement(source: Path | None, extra: str) -> str:
    """What pip builds the wheels of: the checkout, else the released package of this version."""
    suffix = f"[{extra}]" if extra else ""
    return f"{source}{suffix}" if source is not None else f"{PACKAGE}{suffix}=={version()}"


def make_wheels(source: Path | None, extra: str, folder: Path) -> None:
    """pip wheel of the package (with `extra`) and everything it needs into `folder`."""
    command = [sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(folder)]
    if LOCAL_WHEELS.is_dir():
        command += ["--find-links", str(LOCAL_WHEELS)]
    result = subprocess.run(
        [*command, requirement(source, extra)], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise BuildError(
            f"pip could not make the wheels of {requirement(source, extra)}:\n{result.stderr[-2000:]}"
        )


def build_folder(spec: ImageSpec, wheels: Path, own_wheels: Path, folder: Path) -> Path:
    """The build context of `spec`: its Dockerfile, wheels/own (the package's wheel) and,
    unless it installs from an index, wheels/deps (hard links to what it needs)."""
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "wheels" / "deps").mkdir(parents=True)
    (folder / "wheels" / "own").mkdir()
    shutil.copy(HERE / spec.dockerfile, folder / "Dockerfile")
    for wheel in own_wheels.glob("*.whl"):
        _link(wheel, folder / "wheels" / "own" / wheel.name)
    if spec.kind != "cuda":
        for wheel in wheels.glob("*.whl"):
            _link(wheel, folder / "wheels" / "deps" / wheel.name)
    return folder


def _link(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy(source, target)


def split_own(folder: Path, own: Path) -> None:
    """Moves the package's own wheel out of `folder` into `own`."""
    own.mkdir(parents=True, exist_ok=True)
    for wheel in folder.glob(f"{PACKAGE.replace('-', '_')}-*.whl"):
        wheel.replace(own / wheel.name)


def base_available(client: "docker.DockerClient", base: str) -> str:
    """ "" when the base image is here or could be pulled, else why not."""
    import docker.errors

    try:
        client.images.get(base)
        return ""
    except docker.errors.ImageNotFound:
        pass
    try:
        client.images.pull(base)
        return ""
    except docker.errors.APIError as failure:
        return f"its base {base} is not on this machine and could not be pulled ({failure.explanation})"


def build_image(client: "docker.DockerClient", spec: ImageSpec, context: Path) -> Built:
    import docker.errors

    name = spec.name(version())
    previous = _image_id(client, name)
    try:
        image, _logs = client.images.build(
            path=str(context), tag=name, buildargs={"BASE": spec.base}, rm=True, forcerm=True
        )
    except docker.errors.BuildError as failure:
        words = "".join(str(line.get("stream", line.get("error", ""))) for line in failure.build_log)
        raise BuildError(f"{name} did not build:\n{words[-3000:]}") from None
    if previous and previous != image.id:
        _remove_unused(client, previous)
    return Built(name, int(image.attrs["Size"]))


def _image_id(client: "docker.DockerClient", name: str) -> str:
    import docker.errors

    try:
        return str(client.images.get(name).id)
    except docker.errors.ImageNotFound:
        return ""


def _remove_unused(client: "docker.DockerClient", image_id: str) -> None:
    """The image a build replaced, unless a container still uses it (it stays, untagged)."""
    import docker.errors

    with contextlib.suppress(docker.errors.APIError):
        client.images.remove(image_id, noprune=False)


def build_images(
    work: Path, kinds: tuple[str, ...] = ("cluster", "cpu", "cuda"), say: Callable[[str], None] = print
) -> list[Built]:
    """Builds the images of `kinds` in `work` (wheels and build folders, kept for the next
    run); returns each one's name and size, or why it was skipped."""
    import docker

    client = docker.from_env(timeout=600)
    source = checkout()
    say(f"Building from {source or requirement(None, '')}; wheels in {work}")
    built = []
    for spec in (spec for spec in IMAGES if spec.kind in kinds):
        skipped = base_available(client, spec.base)
        if skipped:
            built.append(Built(spec.name(version()), 0, skipped))
            continue
        wheels, own = work / f"wheels-{spec.extra or 'plain'}", work / "own"
        shutil.rmtree(own, ignore_errors=True)
        make_wheels(source, spec.extra, wheels)
        split_own(wheels, own)
        say(f"building {spec.name(version())} ...")
        built.append(build_image(client, spec, build_folder(spec, wheels, own, work / spec.kind)))
    return built
