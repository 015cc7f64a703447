"""`det`: the command line of determined-es.

Only argparse is imported up front; each command imports what it needs when
it runs, so that `det --help` stays fast.
"""

import argparse
import os
import signal
import sys
from collections.abc import Callable, Sequence

from determined.cli import (
    agent,
    checkpoint,
    command,
    deploy,
    events,
    experiment,
    job,
    master,
    model,
    notebook,
    shell,
    task,
    tensorboard,
    trial,
    user,
)
from determined.cli._client import CliError
from determined.cli._output import error

COMMAND_MODULES = (
    experiment,
    trial,
    checkpoint,
    model,
    agent,
    job,
    master,
    user,
    notebook,
    tensorboard,
    command,
    shell,
    task,
    events,
    deploy,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="det", description="determined-es: train models, search hyperparameters, share GPUs."
    )
    parser.add_argument(
        "-m", "--master", help="master address host:port (default: $DET_MASTER or localhost:8080)"
    )
    parser.add_argument(
        "-u",
        "--user",
        help="user to act as (default: $DET_USER with $DET_PASS, else the user of `det user login`, else determined)",
    )
    parser.add_argument("-v", "--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="<command>")
    for module in COMMAND_MODULES:
        module.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs one command. No traceback reaches the user: a closed pipe
    (`det ... | head`) ends the command quietly, Ctrl-C exits 130, a CliError
    is one line, and anything unexpected is one line naming the file that
    holds the details."""
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        run: Callable[[argparse.Namespace], int | None] | None = getattr(args, "run", None)
        if run is None:
            parser.print_help()
            return 0
        code = run(args) or 0
        sys.stdout.flush()  # a closed pipe shows here for what is still buffered
        return code
    except BrokenPipeError:
        return _reader_went_away()
    except KeyboardInterrupt:
        return 130
    except CliError as failure:
        error(str(failure))
        return 1
    except OSError as failure:
        error(_os_error(failure))
        return 1
    except Exception as failure:  # noqa: BLE001 - the one place nothing else catches
        error(_unexpected(failure))
        return 1


def _reader_went_away() -> int:
    """The reader of stdout closed it (`det ... | head`): exit as a tool killed
    by SIGPIPE does, with nothing on stderr. Python would still try to flush
    stdout at exit, so stdout is pointed at /dev/null first."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 128 + signal.SIGPIPE


def _os_error(failure: OSError) -> str:
    """`det: <why>: <file>`, as other command-line tools say it."""
    why = failure.strerror or str(failure)
    return f"det: {why}: {failure.filename}" if failure.filename else f"det: {why}"


def _unexpected(failure: Exception) -> str:
    """One line for the user; the traceback goes to a file it names."""
    import tempfile
    import traceback

    summary = f"det: unexpected error: {type(failure).__name__}: {failure}".splitlines()[0]
    try:
        fd, path = tempfile.mkstemp(prefix="det-error-", suffix=".log")
        with os.fdopen(fd, "w") as details:
            details.write(f"det {' '.join(sys.argv[1:])}\n")
            traceback.print_exception(failure, file=details)
    except OSError as unsaved:
        return f"{summary} (the details could not be saved: {unsaved})"
    return f"{summary} (details in {path})"


def _version() -> str:
    from determined import __version__

    return __version__


if __name__ == "__main__":
    sys.exit(main())
