"""How the harness reaches a trial whose image lacks it.

The harness a Core API script needs (`determined`, gRPC, protobuf and what
they import) is the agent's own: the packages its Python imports for them
(`harness_packages`, found once by a child interpreter) are bind-mounted
read-only, each on its own, under HARNESS_PATH; nothing is copied, and
nothing else of the agent's environment is mounted. The container's command
is wrapped by ENTER_SCRIPT (a POSIX shell, no file): when the image's
`python3` can import `determined`, the image's own is used; else, when it is
the agent's Python version, HARNESS_PATH goes first on PYTHONPATH; else the
trial fails at once, saying so (a fatal error: a restart cannot help).
Without a `python3` the entrypoint runs as it is.

Determined installs its harness wheel into each container at start; mounts
cost nothing at start and need no network, and the compiled modules
(grpc, pydantic-core) match because the version must.
"""

import json
import posixpath
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from services.agent.containers.spec import Mount

HARNESS_PATH = "/opt/determined-es/harness"
# What a trial imports of the harness: the closure of these is mounted.
HARNESS_MODULES = (
    "determined",
    "determined.core",
    "determined._client",
    "determined.proto.api_pb2_grpc",
    "determined.common.storage",
    "determined.common.expconf",
    "grpc",
    "google.protobuf",
    "yaml",
)
# Heavy libraries an image brings itself, if its trial uses them.
NOT_MOUNTED = frozenset({"torch", "torchgen", "numpy", "pynvml", "nvidia", "triton"})
PROBE_TIMEOUT_S = 120.0

_PROBE = """
import importlib, importlib.util, json, sys, sysconfig
for name in sys.argv[1].split(","):
    importlib.import_module(name)
stdlib = sysconfig.get_paths()["stdlib"]
found = {}
for name, module in list(sys.modules.items()):
    top = name.partition(".")[0]
    origin = getattr(module, "__file__", None)
    if top in found or top.startswith("_") or not origin or origin.startswith(stdlib):
        continue
    spec = importlib.util.find_spec(top)
    if spec is None:
        continue
    locations = list(spec.submodule_search_locations or [])
    path = locations[0] if locations else spec.origin
    if path and not path.startswith(stdlib) and path not in ("built-in", "frozen"):
        found[top] = path
print(json.dumps({"version": "%d.%d" % sys.version_info[:2], "packages": found}))
"""

# $1..: the entrypoint. DET_HARNESS_PYTHON: the bundle's Python version.
ENTER_SCRIPT = r"""
if command -v python3 >/dev/null 2>&1; then
  found=$(python3 -c 'import importlib.util as u, sys; print("%d.%d" % sys.version_info[:2], u.find_spec("determined") is not None)' 2>&1) || found="? False"
  version=${found% *}
  if [ "${found#* }" != True ]; then
    if [ "$version" = "$DET_HARNESS_PYTHON" ]; then
      export PYTHONPATH="$DET_HARNESS_PATH${PYTHONPATH:+:$PYTHONPATH}"
    else
      reason="the image's python3 is $version and cannot import determined; this agent's harness is for Python $DET_HARNESS_PYTHON: use an image with Python $DET_HARNESS_PYTHON, or one with determined installed"
      echo "determined agent: $reason" >&2
      printf '%s\n' "$reason" > "$DET_FATAL_ERROR_FILE" 2>/dev/null
      exit 1
    fi
  fi
fi
exec "$@"
"""


class HarnessBundle:
    """The agent's harness packages, as read-only mounts for a container."""

    def __init__(self, version: str, packages: dict[str, str]) -> None:
        self.version = version
        self.packages = packages

    @property
    def mounts(self) -> tuple[Mount, ...]:
        return tuple(
            Mount(path, posixpath.join(HARNESS_PATH, posixpath.basename(path)), read_only=True)
            for name, path in sorted(self.packages.items())
            if name not in NOT_MOUNTED
        )

    def wrap(self, argv: Sequence[str]) -> list[str]:
        """The container's command: ENTER_SCRIPT, then the entrypoint."""
        return ["/bin/sh", "-c", ENTER_SCRIPT, "det-enter", *argv]

    @property
    def variables(self) -> dict[str, str]:
        return {"DET_HARNESS_PATH": HARNESS_PATH, "DET_HARNESS_PYTHON": self.version}


def harness_packages(python: str = sys.executable) -> HarnessBundle:
    """The packages the harness imports in `python` (blocking: a child
    interpreter imports them; run in a thread)."""
    result = subprocess.run(
        [python, "-c", _PROBE, ",".join(HARNESS_MODULES)],
        capture_output=True,
        text=True,
        timeout=PROBE_TIMEOUT_S,
        check=True,
        cwd=Path(python).parent,
    )
    found = json.loads(result.stdout.strip().splitlines()[-1])
    return HarnessBundle(str(found["version"]), {str(k): str(v) for k, v in found["packages"].items()})
