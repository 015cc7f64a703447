"""Creating an experiment with a large context: `--mib` MiB of random
(incompressible) files plus a train.py, as `det experiment create` sends it
(streamed tar.gz through UploadContext, then CreateExperiment naming the hash).

Per rep (each with a context of its own, so nothing is deduplicated):
- create_s: the `det experiment create` process, from start to exit;
- upload_mib_s: the context's size over create_s (CLI start and the create call included);
- cli_peak_rss_mib: the CLI process's peak resident memory (ru_maxrss from wait4);
- trial_started_s: from invoking the CLI to the trial process's first line (the
  agent fetched and extracted the context and started it).

Starts its own cluster in a temporary folder, prints one JSON line, stops it.
Usage: python bench/context_upload.py [--mib 90] [--reps 3]
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _cluster import BenchCluster, created_experiment_id, local_cluster, wait_for_state
from _report import emit, log, wait_for_quiet

TRAIN_PY = "import time\nprint(f'started {time.time():.6f}', flush=True)\n"
CONFIG = "entrypoint: python3 train.py\nsearcher: {name: single, metric: loss, max_length: 1}\n"
FILE_MIB = 2


def make_context(folder: Path, mib: int) -> None:
    (folder / "data").mkdir(parents=True)
    for index in range(mib // FILE_MIB):
        (folder / "data" / f"shard-{index:03d}.bin").write_bytes(os.urandom(FILE_MIB * 2**20))
    (folder / "train.py").write_text(TRAIN_PY)
    (folder / "const.yaml").write_text(CONFIG)


def create(cluster: BenchCluster, folder: Path) -> tuple[float, float, float, int]:
    """(invoked at, wall s, peak RSS MiB, experiment id) of one `det experiment create`."""
    invoked = time.time()
    start = time.perf_counter()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "determined.cli",
            "experiment",
            "create",
            str(folder / "const.yaml"),
            str(folder),
        ],
        env=cluster.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    out, error = process.stdout.read(), process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"det experiment create failed:\n{out.decode()}{error.decode()}")
    return invoked, wall, usage.ru_maxrss / 1024, created_experiment_id(out.decode())


def trial_started_at(cluster: BenchCluster, experiment_id: int) -> float:
    wait_for_state(cluster.stub(), experiment_id, poll=0.2)
    trial_id = cluster.det_json("experiment", "list-trials", str(experiment_id))[0]["id"]
    logs = cluster.det("trial", "logs", str(trial_id))
    [started] = [line.rsplit(" ", 1)[1] for line in logs.splitlines() if "|| started " in line]
    return float(started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mib", type=int, default=90)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    runs = []
    with local_cluster() as cluster, tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary) / "context"
        make_context(folder, args.mib)
        size = sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())
        for rep in range(args.reps):
            (folder / "nonce.txt").write_text(f"{rep} {time.time()}")  # a context of its own
            wait_for_quiet()
            invoked, wall, rss, experiment_id = create(cluster, folder)
            started = trial_started_at(cluster, experiment_id) - invoked
            runs.append(
                {
                    "context_mib": round(size / 2**20, 1),
                    "create_s": round(wall, 2),
                    "upload_mib_s": round(size / 2**20 / wall, 1),
                    "cli_peak_rss_mib": round(rss, 1),
                    "trial_started_s": round(started, 2),
                }
            )
            log(f"rep {rep}: {runs[-1]}")
    emit("context_upload", runs)


if __name__ == "__main__":
    main()
