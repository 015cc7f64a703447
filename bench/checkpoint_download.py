"""Downloading a large checkpoint: `det checkpoint download --mode direct` (straight from the
storage) against `--mode master` (streamed through the gateway's DownloadCheckpointFile).

A trial stores one checkpoint of `--mib` MiB of random bytes in `--files` files; then, per
rep and per mode, `det checkpoint download UUID -o DIR --mode MODE -q` runs into an empty
folder, and the files are checked against the stored ones (sizes and sha256):
- <mode>_s: the CLI process from start to exit (its start, about 0.15 s, included);
- <mode>_mib_s: the checkpoint's size over <mode>_s.

Storage: the cluster's default shared_fs (direct = a local copy), or with `--s3` a moto S3
server (tests/support/s3_server.py) started here and given to `cluster-up --checkpoint-storage` (direct = boto3 from the
bucket; master = the gateway reads the bucket and streams).

Starts its own cluster in a temporary folder, prints one JSON line, stops it.
Usage: python bench/checkpoint_download.py [--mib 200] [--files 4] [--reps 3] [--s3]
"""

import argparse
import hashlib
import shutil
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from _cluster import BenchCluster, created_experiment_id, local_cluster, wait_for_state
from _report import emit, log, wait_for_quiet

MODES = ("direct", "master")

TRAIN_PY = """
import hashlib, os, sys
import determined as det

mib, files = int(sys.argv[1]), int(sys.argv[2])
with det.core.init() as core_context:
    with core_context.checkpoint.store_path({"steps_completed": 1}) as (path, storage_id):
        for index in range(files):
            chunk = os.urandom(mib * 2**20 // files)
            (path / f"shard-{index}.bin").write_bytes(chunk)
            print("sha256", f"shard-{index}.bin", hashlib.sha256(chunk).hexdigest(), flush=True)
    print("checkpoint", storage_id, flush=True)
"""


def store_checkpoint(cluster: BenchCluster, folder: Path, mib: int, files: int) -> tuple[str, dict[str, str]]:
    """The uuid of the trial's checkpoint and the sha256 of each of its files."""
    (folder / "train.py").write_text(TRAIN_PY)
    (folder / "config.yaml").write_text(
        f"entrypoint: python3 train.py {mib} {files}\nsearcher: {{name: single, metric: loss}}\nmax_restarts: 0\n"
    )
    experiment_id = created_experiment_id(
        cluster.det("experiment", "create", str(folder / "config.yaml"), str(folder))
    )
    state = wait_for_state(cluster.stub(), experiment_id, poll=0.5)
    trial_id = cluster.det_json("experiment", "list-trials", str(experiment_id))[0]["id"]
    logs = cluster.det("trial", "logs", str(trial_id))
    if state != "COMPLETED":
        raise SystemExit(f"the trial storing the checkpoint ended {state}:\n{logs[-3000:]}")
    digests = {}
    uuid = ""
    for line in logs.splitlines():
        words = line.split("|| ", 1)[-1].split()
        if words[-3:-2] == ["sha256"]:
            digests[words[-2]] = words[-1]
        elif words[-2:-1] == ["checkpoint"]:
            uuid = words[-1]
    return uuid, digests


def download(cluster: BenchCluster, uuid: str, target: Path, mode: str) -> float:
    """Seconds `det checkpoint download` takes, the CLI's start included."""
    start = time.perf_counter()
    cluster.det("checkpoint", "download", uuid, "-o", str(target), "--mode", mode, "-q")
    return time.perf_counter() - start


def check(target: Path, digests: dict[str, str]) -> None:
    for name, digest in digests.items():
        with (target / name).open("rb") as file:
            got = hashlib.file_digest(file, "sha256").hexdigest()
        if got != digest:
            raise SystemExit(f"{target / name} differs from the stored file")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mib", type=int, default=200)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--s3", action="store_true", help="store on a moto S3 server instead of shared_fs")
    args = parser.parse_args()
    runs = []
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        with ExitStack() as stack:
            up_args: list[str] = []
            if args.s3:
                import yaml

                sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
                from support.s3_server import running_s3_server  # the tests' moto server, shared

                s3 = stack.enter_context(running_s3_server())
                (folder / "storage.yaml").write_text(yaml.safe_dump(s3.storage(prefix="checkpoints")))
                up_args = ["--checkpoint-storage", str(folder / "storage.yaml")]
            cluster = stack.enter_context(local_cluster(up_args=up_args))
            (folder / "context").mkdir()
            uuid, digests = store_checkpoint(cluster, folder / "context", args.mib, args.files)
            log(f"checkpoint {uuid}: {args.mib} MiB in {len(digests)} files")
            for rep in range(args.reps):
                run: dict[str, Any] = {}
                for mode in MODES:
                    target = folder / f"download-{mode}"
                    shutil.rmtree(target, ignore_errors=True)
                    wait_for_quiet()
                    seconds = download(cluster, uuid, target, mode)
                    check(target, digests)
                    run[f"{mode}_s"] = round(seconds, 3)
                    run[f"{mode}_mib_s"] = round(args.mib / seconds, 1)
                log(f"rep {rep + 1}: {run}")
                runs.append(run)
    runs[0]["storage"] = "s3 (moto)" if args.s3 else "shared_fs"
    runs[0]["mib"] = args.mib
    emit("checkpoint_download", runs)


if __name__ == "__main__":
    main()
