"""Determined 0.38.1's own client against this cluster, beside ours, in the same run: `det
experiment list` with `--experiments` experiments, and `det trial logs T` of a trial that
printed `--lines` lines (through the agent's log shipping, as bench/trial_logs.py), each
`> /dev/null`, CLI start included. Its `det` talks to the gateway's HTTP API (REST, the
logs as newline-delimited JSON), ours to its gRPC port. The outputs are checked once first
(every experiment and every line must be there).

Its client lives in a venv of its own (tests/support/determined_client.py finds it:
$DET038_VENV, .ci/venvs/det038 or /work/det038). Starts its own cluster, prints one JSON
line (seconds, and lines/s for the logs; medians of `--reps`), stops it.
Usage: python bench/determined_client.py [--lines 1000000] [--experiments 1000] [--reps 3]
"""

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _cluster import BenchCluster, created_experiment_id, local_cluster, wait_for_state
from _report import emit, log, wait_for_quiet
from trial_logs import CONFIG as LOGS_CONFIG
from trial_logs import PRINT_PY

from determined.proto import api_pb2

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
from support.determined_client import client_env, determined_venv

PASSWORD = "Bench-Password1"
LISTED_CONFIG = """
name: listed-{n:04d}
entrypoint: python3 train.py
searcher: {{name: single, metric: loss, max_length: 1}}
"""


def create_paused(cluster: BenchCluster, count: int) -> None:
    """`count` paused experiments (nothing runs), one at a time through CreateExperiment."""
    stub = cluster.stub()
    for n in range(count):
        stub.CreateExperiment(
            api_pb2.CreateExperimentRequest(config_yaml=LISTED_CONFIG.format(n=n), activate=False)
        )


def run(command: list[str], env: dict[str, str], cwd: Path, out: int) -> float:
    """Seconds the command took, its stdout to `out`."""
    started = time.perf_counter()
    subprocess.run(command, env=env, cwd=cwd, stdout=out, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - started


def counted(command: list[str], env: dict[str, str], cwd: Path, marker: bytes) -> int:
    """How many lines of the command's output hold `marker`."""
    with tempfile.TemporaryFile() as output:
        run(command, env, cwd, output.fileno())
        output.seek(0)
        return sum(1 for line in output if marker in line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--experiments", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    venv = determined_venv()
    if venv is None:
        raise SystemExit("Determined 0.38.1's client is not installed: set DET038_VENV")
    up = ["--initial-user-password", PASSWORD]
    with local_cluster(up_args=up) as cluster, tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        (folder / "print_lines.py").write_text(PRINT_PY)
        (folder / "const.yaml").write_text(LOGS_CONFIG.format(lines=args.lines))
        experiment_id = created_experiment_id(
            cluster.det("experiment", "create", str(folder / "const.yaml"), str(folder))
        )
        started = time.perf_counter()
        create_paused(cluster, args.experiments)
        log(f"{args.experiments} paused experiments created in {time.perf_counter() - started:.1f} s")
        state = wait_for_state(cluster.stub(), experiment_id, poll=0.5)
        trial_id = cluster.det_json("experiment", "list-trials", str(experiment_id))[0]["id"]
        log(f"experiment {experiment_id} {state}; trial {trial_id} printed {args.lines} lines")
        port = int(cluster.env["DET_MASTER"].rsplit(":", 1)[1])
        theirs_env = client_env(f"http://127.0.0.1:{port + 1}", folder / "config", "admin", PASSWORD)
        commands = {
            "ours": [sys.executable, "-m", "determined.cli"],
            "theirs": [str(venv / "bin" / "det")],
        }
        envs = {"ours": cluster.env, "theirs": theirs_env}
        logs = ["trial", "logs", str(trial_id)]
        for side, det in commands.items():
            shown = counted(det + logs, envs[side], folder, b"|| step ")
            listed = counted(det + ["experiment", "list"], envs[side], folder, b"listed-")
            if (shown, listed) != (args.lines, args.experiments):
                raise SystemExit(
                    f"{side}: {shown} of {args.lines} lines, {listed} of {args.experiments} experiments"
                )
        runs = []
        for _ in range(args.reps):
            figures: dict[str, float] = {}
            for side, det in commands.items():
                wait_for_quiet()
                figures[f"{side}_list_s"] = round(
                    run(det + ["experiment", "list"], envs[side], folder, subprocess.DEVNULL), 3
                )
                wait_for_quiet()
                wall = run(det + logs, envs[side], folder, subprocess.DEVNULL)
                figures[f"{side}_logs_s"] = round(wall, 3)
                figures[f"{side}_logs_lines_per_s"] = round(args.lines / wall)
            log(", ".join(f"{name} {value:,}" for name, value in figures.items()))
            runs.append(figures)
    result = emit("determined_client", runs)
    for side in commands:
        log(
            f"{side}: det experiment list ({args.experiments:,} experiments) {result[f'{side}_list_s']} s; "
            f"det trial logs ({args.lines:,} lines) {result[f'{side}_logs_s']} s, "
            f"{statistics.median(r[f'{side}_logs_lines_per_s'] for r in runs):,.0f} lines/s"
        )


if __name__ == "__main__":
    main()
