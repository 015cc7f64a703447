"""Launchers: `python3 -m determined.launch.<name> [OVERRIDES... --] SCRIPT...`.

A launcher runs once per container (here: once per agent that holds a part of the
allocation) and starts that container's workers, one per slot. Arguments before the first
`--` go to the underlying launcher; the rest is the worker's command. This package imports
nothing heavy: the launchers only build and run command lines.
"""

import argparse
import sys

from determined import _info


def parse_args(argv: list[str], prog: str) -> tuple[list[str], list[str]]:
    """(overrides, script) from a launcher's arguments, as Determined splits them: on the
    first `--` if there is one. `--trial module:Class` (deprecated: a legacy Trial class)
    becomes the script `python3 -m determined.exec.harness module:Class`. An empty script,
    or both `--trial` and a script, end the process with a usage error."""
    if "--" in argv:
        split = argv.index("--")
        overrides, rest = argv[:split], argv[split + 1 :]
    else:
        overrides, rest = [], argv
    parser = argparse.ArgumentParser(
        prog=prog, usage="%(prog)s [[OVERRIDES...] --] SCRIPT...", description=__doc__
    )
    parser.add_argument("--trial", help=argparse.SUPPRESS)
    parser.add_argument("script", nargs=argparse.REMAINDER)
    parsed = parser.parse_args(rest)
    if parsed.trial is not None:
        if parsed.script:
            parser.error(f"give either --trial {parsed.trial} or a script, not both")
        return overrides, trial_script(parsed.trial)
    if not parsed.script:
        parser.error("empty script: give the command each worker runs")
    return overrides, list(parsed.script)


def trial_script(entrypoint: str) -> list[str]:
    """The command each worker runs for a legacy Trial class `module:Class`."""
    return [sys.executable, "-m", "determined.exec.harness", entrypoint]


def cluster_info(prog: str) -> _info.ClusterInfo:
    """This task's ClusterInfo; launchers run only on a cluster (off it, exit 2)."""
    info = _info.get_cluster_info()
    if info is None:
        sys.exit(f"{prog}: must run on a Determined cluster (DET_MASTER and DET_ALLOCATION_ID are not set)")
    return info
