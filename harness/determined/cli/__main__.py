"""`det`: the command line of determined-es.

Only argparse is imported up front; each command imports what it needs when
it runs, so that `det --help` stays fast.
"""

import argparse
import sys
from collections.abc import Callable, Sequence

from determined.cli import agent, deploy, experiment, trial
from determined.cli._client import CliError
from determined.cli._output import error

COMMAND_MODULES = (experiment, trial, agent, deploy)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="det", description="determined-es: train models, search hyperparameters, share GPUs."
    )
    parser.add_argument(
        "-m", "--master", help="master address host:port (default: $DET_MASTER or localhost:8080)"
    )
    parser.add_argument("-u", "--user", help="user to act as (default: determined)")
    parser.add_argument("-v", "--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="<command>")
    for module in COMMAND_MODULES:
        module.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    run: Callable[[argparse.Namespace], int | None] | None = getattr(args, "run", None)
    if run is None:
        parser.print_help()
        return 0
    try:
        return run(args) or 0
    except CliError as failure:
        error(str(failure))
        return 1
    except KeyboardInterrupt:
        return 130


def _version() -> str:
    from determined import __version__

    return __version__


if __name__ == "__main__":
    sys.exit(main())
