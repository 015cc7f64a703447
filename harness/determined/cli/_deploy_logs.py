"""`det deploy local logs [PART ...] [--tail K] [-f]`: the logs of a local
cluster's parts, read from its data directory (logs/<service>.log, what each
part printed in logs/<part>.out, nats-server.log, postgres.log,
supervisor.log), each line led by its file's name; a cluster that
`cluster-up --docker` started: `docker compose logs` of its containers.

The files are read here, on the cluster's machine: the gateway serves only
its own lines (`det master logs`), never another process's files.
"""

import argparse
import sys
import time
from pathlib import Path
from typing import TextIO

from determined.cli._log_filters import line_count

DEFAULT_TAIL = 50
POLL_INTERVAL_S = 0.5
# Read backwards from a file's end in blocks of this many bytes to find its last lines.
BLOCK = 64 * 1024
SUFFIXES = (".log", ".out")


def add_logs_parser(verbs: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    from determined.cli.deploy import _add_data_dir

    logs = verbs.add_parser("logs", help="the logs of the cluster's parts (gateway, scheduler, agents, ...)")
    logs.add_argument("parts", nargs="*", metavar="PART", help="only these parts (default: every one)")
    _add_data_dir(logs)
    logs.add_argument(
        "--tail",
        type=line_count,
        default=DEFAULT_TAIL,
        metavar="K",
        help=f"the last K lines of each (default {DEFAULT_TAIL})",
    )
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing new lines (Ctrl-C ends)")
    logs.set_defaults(run=show_logs)


def show_logs(args: argparse.Namespace) -> int:
    from deploy.compose import cluster as compose
    from determined.cli._client import CliError
    from determined.cli.deploy import _data_dir

    data_dir = _data_dir(args)
    if compose.is_compose_cluster(data_dir):
        if args.follow:
            raise CliError(f"follow them with {compose.logs_hint(data_dir).removeprefix('logs: ')} -f")
        sys.stdout.write(
            compose.compose(data_dir, "logs", "--no-color", "--tail", str(args.tail), *args.parts).stdout
        )
        return 0
    files = log_files(data_dir / "logs", args.parts)
    if not files:
        raise CliError(f"no logs of {', '.join(args.parts) or 'any part'} in {data_dir / 'logs'}")
    positions = {}
    for path in files:
        lines, positions[path] = last_lines(path, args.tail)
        write(sys.stdout, path, lines)
    sys.stdout.flush()
    while args.follow:
        time.sleep(POLL_INTERVAL_S)
        for path in files:
            lines, positions[path] = new_lines(path, positions[path])
            write(sys.stdout, path, lines)
        sys.stdout.flush()
    return 0


def log_files(folder: Path, parts: list[str]) -> list[Path]:
    """The current log files (not the rotated ones) of these parts (all: every part's), by name."""
    if not folder.is_dir():
        return []
    found = [p for p in folder.iterdir() if p.suffix in SUFFIXES and p.is_file()]
    return sorted(p for p in found if not parts or p.stem in parts)


def last_lines(path: Path, count: int) -> tuple[list[str], int]:
    """(the file's last `count` lines, its size): read backwards from its end, block by block."""
    with path.open("rb") as file:
        end = file.seek(0, 2)
        start, data = end, b""
        while start > 0 and data.count(b"\n") <= count:
            start = max(0, start - BLOCK)
            file.seek(start)
            data = file.read(end - start)
    lines = data.decode(errors="replace").splitlines()
    return lines[-count:], end


def new_lines(path: Path, position: int) -> tuple[list[str], int]:
    """(the whole lines written after `position`, where they end); from the start
    of a file that shrank (rotated: a new file under the name)."""
    try:
        with path.open("rb") as file:
            size = file.seek(0, 2)
            start = 0 if size < position else position
            file.seek(start)
            data = file.read(size - start)
    except FileNotFoundError:  # rotated away and not made again yet
        return [], 0
    whole = data[: data.rfind(b"\n") + 1]
    return whole.decode(errors="replace").splitlines(), start + len(whole)


def write(out: TextIO, path: Path, lines: list[str]) -> None:
    """Each line led by its file's name."""
    out.write("".join(f"{path.name} | {line}\n" for line in lines))
