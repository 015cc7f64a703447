"""`det trial logs` throughput, end to end: a trial prints `--lines` lines
(through the agent's log shipping, batches of up to 500 lines in the LOGS
stream), then `det trial logs T > /dev/null` is timed (CLI start included):
lines per second, median of `--reps`. The output is also counted once, so a
fast but lossy read cannot pass.

Starts its own cluster in a temporary folder, prints one JSON line, stops it.
Usage: python bench/trial_logs.py [--lines 1000000] [--reps 3]
"""

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _cluster import created_experiment_id, local_cluster, wait_for_state
from _report import emit, log, wait_for_quiet

PRINT_PY = """
import sys
lines = int(sys.argv[1])
out = sys.stdout
for i in range(lines):
    out.write(f"step {i:>9}: loss=0.{i % 997:03d} accuracy=0.{i % 991:03d} the quick brown fox jumps\\n")
"""
CONFIG = (
    "entrypoint: python3 print_lines.py {lines}\nsearcher: {{name: single, metric: loss, max_length: 1}}\n"
)


def det_logs(env: dict[str, str], trial_id: int, out: int | None) -> float:
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "determined.cli", "trial", "logs", str(trial_id)],
        env=env,
        stdout=out,
        check=True,
    )
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    with local_cluster() as cluster, tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        (folder / "print_lines.py").write_text(PRINT_PY)
        (folder / "const.yaml").write_text(CONFIG.format(lines=args.lines))
        experiment_id = created_experiment_id(
            cluster.det("experiment", "create", str(folder / "const.yaml"), str(folder))
        )
        state = wait_for_state(cluster.stub(), experiment_id, poll=0.5)
        trial_id = cluster.det_json("experiment", "list-trials", str(experiment_id))[0]["id"]
        log(f"experiment {experiment_id} {state}; counting trial {trial_id}'s lines")
        with tempfile.TemporaryFile() as output:
            det_logs(cluster.env, trial_id, output.fileno())
            output.seek(0)
            shown = sum(1 for line in output if b"|| step " in line)
        if shown != args.lines:
            raise SystemExit(f"det trial logs showed {shown} of the {args.lines} lines printed")
        runs = []
        for _ in range(args.reps):
            wait_for_quiet()
            wall = det_logs(cluster.env, trial_id, subprocess.DEVNULL)
            runs.append({"lines": shown, "wall_s": round(wall, 3), "lines_per_s": round(shown / wall)})
            log(f"{shown} lines in {wall:.2f} s: {shown / wall:,.0f} lines/s")
    emit("trial_logs", runs)
    log(f"median {statistics.median(r['lines_per_s'] for r in runs):,.0f} lines/s")


if __name__ == "__main__":
    main()
