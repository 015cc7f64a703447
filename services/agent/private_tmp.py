"""The agent's side of a process trial's private /tmp (`determined.exec.private_tmp`): what
of the machine's /tmp the trial still sees, whether this machine lets the agent make one
for the processes it starts itself (checked once), and the step such a process runs before
it execs. A child of the fork server makes its own (or falls back) from its request."""

import asyncio
import functools
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import determined
import determined.exec.private_tmp as private_tmp

PROBE_TIMEOUT_S = 30.0
# Where the `determined` package is (an editable install: the checkout's harness/).
HARNESS_FOLDER = str(Path(determined.__file__).parent.parent)


@dataclass
class TrialTmp:
    """An allocation's /tmp: its folder, and the paths under the machine's /tmp it still sees."""

    folder: Path
    keep: list[str]

    @classmethod
    def of(
        cls,
        folder: Path,
        work_dir: Path,
        python_bin_dir: str,
        config: dict[str, Any],
        read_storages: Sequence[Any] = (),
    ) -> "TrialTmp":
        """`folder`'s FOLDER; kept: the agent's work folder (its allocation's folder), the Python
        it runs and the agent's (whose packages a trial venv loads, the harness among them),
        and the folders of its `shared_fs` checkpoint storage (`host_path`/`storage_path`) and
        of those it reads (a TensorBoard's trials')."""
        keep = [str(work_dir), python_bin_dir, sys.prefix, sys.base_prefix, HARNESS_FOLDER]
        for storage in (config.get("checkpoint_storage"), *read_storages):
            if isinstance(storage, dict) and storage.get("type") == "shared_fs":
                host_path, storage_path = storage.get("host_path"), storage.get("storage_path")
                if isinstance(host_path, str) and host_path:
                    keep.append(
                        os.path.join(host_path, storage_path if isinstance(storage_path, str) else "")
                    )
        return cls(folder / private_tmp.FOLDER, [path for path in keep if path])

    def request(self) -> dict[str, object]:
        """The fork server's "tmp" (its child makes its own /tmp, or falls back, itself)."""
        return {"folder": str(self.folder), "keep": self.keep}

    async def for_new_process(self, env: dict[str, str]) -> tuple[Callable[[], None], str]:
        """For a process the agent starts itself: the step it runs before it execs (and before
        it changes user), and what its log must say ("": nothing). Where this machine refuses
        (checked once), the step does nothing and env gets TMPDIR."""
        try:
            private_tmp.kept_trees(self.keep)
        except ValueError as error:
            why = str(error)
        else:
            why = await asyncio.to_thread(_probe)
        if not why:
            return self._enter, ""
        env["TMPDIR"] = str(self.folder)
        return _nothing, private_tmp.shared_note(why, str(self.folder))

    def _enter(self) -> None:
        """In the new process: should the kernel refuse after all, it goes on and says so."""
        try:
            private_tmp.enter(str(self.folder), self.keep)
        except (OSError, ValueError) as error:
            os.write(2, f"{private_tmp.shared_note(str(error))}\n".encode())


def _nothing() -> None:
    pass


@functools.cache
def _probe() -> str:
    """Tries it once in a new process, as the agent's user (who runs `entering`)."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", "determined.exec.private_tmp"],
            capture_output=True,
            text=True,
            # Not the agent's folder: under the machine's /tmp it would not be in the probe's.
            cwd="/",
            timeout=PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as error:
        return f"cannot check: {error}"
    return "" if done.returncode == 0 else (done.stdout.strip() or f"exit {done.returncode}")
