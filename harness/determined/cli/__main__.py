"""`det`: the command line of determined-es.

Only argparse and the module of the noun asked for are imported up front; each
command imports what it needs when it runs, so that a call starts fast.
"""

import argparse
import importlib
import os
import signal
import sys
from collections.abc import Callable, Sequence

from determined.cli._client import CliError
from determined.cli._output import error

# Each module of determined.cli that adds nouns to `det`, with the nouns (and their aliases) it
# adds, in `det --help`'s order. `det <noun> ...` imports and builds that one module's parser: a
# det call is mostly start-up, and importing and building every noun's verbs cost as much as the
# call itself (tests/unit/test_cli_parsers.py checks this table against the modules).
COMMAND_MODULES: dict[str, tuple[str, ...]] = {
    "experiment": ("experiment", "e"),
    "trial": ("trial", "t"),
    "checkpoint": ("checkpoint", "c"),
    "model": ("model", "m"),
    "agent": ("agent", "a", "slot", "s"),
    "job": ("job", "j"),
    "master": ("master", "version"),
    "user": ("user", "u"),
    "notebook": ("notebook",),
    "tensorboard": ("tensorboard",),
    "command": ("command", "cmd"),
    "shell": ("shell",),
    "task": ("task",),
    "events": ("events",),
    "deploy": ("deploy",),
}
# `det`'s own options that take a value (the noun comes after them).
_VALUE_OPTIONS = ("-m", "--master", "-u", "--user")


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """`det`'s parser; given the arguments, only as much of it as they need (all of it for
    `det --help` or a noun it does not know, so that help and errors read the same)."""
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
    for name in _modules_for(None if argv is None else _noun(argv)):
        importlib.import_module(f"determined.cli.{name}").add_parser(commands)
    return parser


def _noun(argv: Sequence[str]) -> str | None:
    """The noun of `det [-m M] [-u U] <noun> ...`; None where an option of det's own other than
    these (`--help`, an abbreviation) comes first."""
    tokens = iter(argv)
    for token in tokens:
        if token in _VALUE_OPTIONS:
            next(tokens, None)
        elif token.startswith(("--master=", "--user=")) or (token[:2] in ("-m", "-u") and token[2:3] != "-"):
            continue
        elif token.startswith("-"):
            return None
        else:
            return token
    return None


def _modules_for(noun: str | None) -> list[str]:
    """The module that adds this noun, or every module where none does."""
    owners = [name for name, nouns in COMMAND_MODULES.items() if noun in nouns]
    return owners or list(COMMAND_MODULES)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs one command. No traceback reaches the user: a closed pipe
    (`det ... | head`) ends the command quietly, Ctrl-C exits 130, a CliError
    is one line, and anything unexpected is one line naming the file that
    holds the details."""
    try:
        argv = sys.argv[1:] if argv is None else argv
        parser = build_parser(argv)
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
