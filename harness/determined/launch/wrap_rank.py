"""`python3 -m determined.launch.wrap_rank RANK_VAR[,ALT...]|N [--no-redirect-stdio] -- CMD...`

Runs CMD and prefixes each line of its stdout and stderr with `[rank=N] ` (a line ends at
`\\n` or `\\r`, so progress bars are tagged too), which the agent parses into the log
line's rank (`det trial logs --rank N`). The rank is N, or the value of the first of the
named environment variables that is set. `--no-redirect-stdio` is accepted for
compatibility: here the tagged lines always go to this process's own stdout and stderr,
which the agent ships. The exit code is CMD's (128 + N when a signal N ended it).

torchrun starts each worker in a session of its own, so a SIGKILL of the launcher's process
group (the agent's last resort) would not reach the workers: on Linux, this process and CMD
ask the kernel to SIGKILL them when their parent dies, so that nothing outlives the launcher.
"""

import argparse
import ctypes
import os
import re
import signal
import subprocess
import sys
import threading
from typing import BinaryIO

_LINE_END = re.compile(rb"(?<=[\r\n])")
_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Linux: the kernel SIGKILLs this process when its parent (thread) dies; elsewhere a no-op."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def resolve_rank(spec: str) -> int:
    """`spec` as an int, else the value of the first set variable of a comma-separated list."""
    if spec.strip().lstrip("-").isdigit():
        return int(spec)
    for name in spec.split(","):
        value = os.environ.get(name.strip())
        if value is not None:
            return int(value)
    raise ValueError(f"none of the rank variables {spec} is set")


def forward(source: BinaryIO, dest: BinaryIO, prefix: bytes) -> None:
    """Copy `source` to `dest` line by line, each line prefixed, until end of file."""
    pending = b""
    while chunk := source.read1(65536):  # type: ignore[attr-defined]
        *lines, pending = _LINE_END.split(pending + chunk)
        if lines:
            dest.write(b"".join(prefix + line for line in lines))
            dest.flush()
    if pending:
        dest.write(prefix + pending)
        dest.flush()


def main(argv: list[str]) -> int:
    if "--" not in argv:
        sys.exit(
            "usage: python3 -m determined.launch.wrap_rank RANK_VAR[,ALT...]|N [--no-redirect-stdio] -- CMD..."
        )
    split = argv.index("--")
    parser = argparse.ArgumentParser(prog="python3 -m determined.launch.wrap_rank")
    parser.add_argument("rank", help="the rank, or environment variables that hold it (comma-separated)")
    parser.add_argument("--no-redirect-stdio", action="store_true", help="accepted for compatibility")
    parsed = parser.parse_args(argv[:split])
    command = argv[split + 1 :]
    if not command:
        parser.error("empty command")
    try:
        prefix = f"[rank={resolve_rank(parsed.rank)}] ".encode()
    except ValueError as error:
        parser.error(str(error))
    die_with_parent()
    child = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=die_with_parent,  # noqa: PLW1509 - no thread yet
    )
    for signum in _FORWARDED:
        signal.signal(signum, lambda signum, frame: child.send_signal(signum))
    assert child.stdout is not None and child.stderr is not None
    threads = [
        threading.Thread(target=forward, args=(child.stdout, sys.stdout.buffer, prefix), daemon=True),
        threading.Thread(target=forward, args=(child.stderr, sys.stderr.buffer, prefix), daemon=True),
    ]
    for thread in threads:
        thread.start()
    code = child.wait()
    for thread in threads:
        thread.join()
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
