"""Whether a process id names a live process: shared by the agent (trials
forked by its fork server are not its children) and `det deploy local`
(services started by an earlier CLI run)."""

import os


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A child that exited but was not reaped is a zombie: not alive.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False
