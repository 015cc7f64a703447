"""Our benchmarks and the peers' same work, in one run on this machine, one at a time, then a
side-by-side table with ratios.

  python bench/peers.py [--reps 1] [--only NAME ...] [--out DIR]
  python bench/peers.py --table DIR        # print the table again from a run's results

Ours (this venv): asha_digits.py, trial_overhead.py, stop_latency.py. The peers' (their own
venv, never this one: PY=~/peers-venv/bin/python or --peers-python; scripts from
--peers-dir, default ../shared/bench-peers beside the repository): ray_tune_digits.py,
ray_tune_overhead.py --mode fifo, and the same with --reuse-actors. Each bench's stdout and
stderr are kept in DIR (default /tmp/det-bench-peers-<time>); its last JSON line is its result.
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_PEERS_DIR = HERE.parent.parent / "shared" / "bench-peers"

# name -> (ours?, script, extra args); run in this order.
BENCHES: dict[str, tuple[bool, str, list[str]]] = {
    "trial_overhead": (True, "trial_overhead.py", []),
    "trial_overhead_forked": (True, "trial_overhead.py", ["--fork-trials"]),
    "ray_fifo": (False, "ray_tune_overhead.py", ["--mode", "fifo"]),
    "ray_fifo_reuse": (False, "ray_tune_overhead.py", ["--mode", "fifo", "--reuse-actors"]),
    "asha_digits": (True, "asha_digits.py", []),
    "asha_digits_forked": (True, "asha_digits.py", ["--fork-trials"]),
    "ray_digits_asha": (False, "ray_tune_digits.py", []),
    "stop_latency": (True, "stop_latency.py", []),
}


def run_bench(name: str, args: argparse.Namespace, out: Path) -> dict[str, Any] | None:
    ours, script, extra = BENCHES[name]
    if ours:
        reps = ["--reps", str(args.stop_samples if name == "stop_latency" else args.reps)]
        command = [sys.executable, str(HERE / script), *extra, *reps]
        cwd = HERE.parent
    else:
        command = [args.peers_python, str(Path(args.peers_dir) / script), *extra, "--reps", str(args.reps)]
        cwd = Path(args.peers_dir)
    print(f"== {name} {time.strftime('%H:%M:%S')}: {' '.join(command)}", flush=True)
    start = time.time()
    with open(out / f"{name}.out", "w") as stdout, open(out / f"{name}.err", "w") as stderr:
        code = subprocess.run(command, cwd=cwd, stdout=stdout, stderr=stderr, check=False).returncode
    lines = [line for line in (out / f"{name}.out").read_text().splitlines() if line.startswith("{")]
    if code != 0 or not lines:
        tail = (out / f"{name}.err").read_text()[-1500:]
        print(f"   FAILED (exit {code}) after {time.time() - start:.0f} s; {out / (name + '.err')}:\n{tail}")
        return None
    result = json.loads(lines[-1])
    (out / f"{name}.json").write_text(json.dumps(result) + "\n")
    print(f"   done in {time.time() - start:.0f} s", flush=True)
    return result


def load(out: Path) -> dict[str, dict[str, Any]]:
    results = {}
    for name in BENCHES:
        path = out / f"{name}.json"
        if path.exists():
            results[name] = json.loads(path.read_text())
    return results


def figure(results: dict[str, dict[str, Any]], name: str, key: str) -> float | None:
    """A bench's median figure: ours have it at the top level, the peers' under "median"."""
    result = results.get(name)
    if result is None:
        return None
    value = result.get("median", result).get(key)
    return float(value) if isinstance(value, (int, float)) else None


def fmt(value: float | None, unit: str = "", digits: int = 1) -> str:
    return "—" if value is None else f"{value:,.{digits}f}{unit}"


def ratio(a: float | None, b: float | None) -> str:
    return "—" if a is None or b is None or b == 0 else f"{a / b:.2f}×"


def table(results: dict[str, dict[str, Any]]) -> str:
    ours_asha, ray_asha = (
        figure(results, "asha_digits", "wall_s"),
        figure(results, "ray_digits_asha", "wall_s"),
    )
    ours_ep, ray_ep = (
        figure(results, "asha_digits", "total_epochs"),
        figure(results, "ray_digits_asha", "total_epochs"),
    )
    ours_acc, ray_acc = (
        figure(results, "asha_digits", "best_accuracy"),
        figure(results, "ray_digits_asha", "best_val_acc"),
    )
    ours_ovh = figure(results, "trial_overhead", "wall_s")
    fifo, reuse = figure(results, "ray_fifo", "wall_s"), figure(results, "ray_fifo_reuse", "wall_s")
    per_trial = figure(results, "trial_overhead", "per_trial_s")
    rows = [
        (
            "ASHA digits: wall, create → COMPLETED (s)",
            fmt(ours_asha),
            f"{fmt(ray_asha)} (Tuner.fit)",
            ratio(ours_asha, ray_asha),
        ),
        (
            "ASHA digits: epochs trained, all trials",
            fmt(ours_ep, digits=0),
            fmt(ray_ep, digits=0),
            ratio(ours_ep, ray_ep),
        ),
        (
            "ASHA digits: best validation accuracy (≥ 0.99?)",
            fmt(ours_acc, digits=4) + ("" if ours_acc is None else (" ✓" if ours_acc >= 0.99 else " ✗")),
            fmt(ray_acc, digits=4),
            "—",
        ),
        (
            "64 trivial trials, 2 at a time: wall (s)",
            fmt(ours_ovh),
            f"fifo {fmt(fifo)} / reuse_actors {fmt(reuse)}",
            f"{ratio(ours_ovh, fifo)} fifo / {ratio(ours_ovh, reuse)} reuse",
        ),
        (
            "… per trial (s)",
            fmt(per_trial, digits=3),
            (
                f"fifo {fmt(None if fifo is None else fifo / 64, digits=3)} / reuse "
                f"{fmt(None if reuse is None else reuse / 64, digits=3)}"
            ),
            "—",
        ),
    ]
    forked_asha = figure(results, "asha_digits_forked", "wall_s")
    forked_ovh = figure(results, "trial_overhead_forked", "wall_s")
    rows += [
        (
            "with --fork-trials: ASHA digits wall (s)",
            fmt(forked_asha),
            fmt(ray_asha),
            ratio(forked_asha, ray_asha),
        ),
        (
            "with --fork-trials: ASHA digits epochs / best accuracy",
            (
                f"{fmt(figure(results, 'asha_digits_forked', 'total_epochs'), digits=0)} / "
                f"{fmt(figure(results, 'asha_digits_forked', 'best_accuracy'), digits=4)}"
            ),
            "—",
            "—",
        ),
        (
            "with --fork-trials: 64 trivial trials wall (s)",
            fmt(forked_ovh),
            f"fifo {fmt(fifo)} / reuse_actors {fmt(reuse)}",
            f"{ratio(forked_ovh, fifo)} fifo / {ratio(forked_ovh, reuse)} reuse",
        ),
    ]
    stop = results.get("stop_latency")
    if stop:
        for key, label in (
            ("stop_requested_to_preempt_ms", "stop decision → should_preempt() true (ms)"),
            ("pause_invoked_to_preempt_ms", "`det e pause` invoked → should_preempt() true (ms)"),
            ("preempt_to_exited_ms", "should_preempt() → allocation exited (ms)"),
            ("activate_invoked_to_polling_ms", "`det e activate` → resumed trial polling (ms)"),
        ):
            if f"{key}_median" in stop:
                rows.append(
                    (label, f"median {fmt(stop[f'{key}_median'])}, p99 {fmt(stop[f'{key}_p99'])}", "—", "—")
                )
    lines = ["| figure | determined-es | Ray Tune (same run) | ratio ours/Ray |", "|---|---|---|---|"]
    lines += [f"| {' | '.join(row)} |" for row in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reps", type=int, default=1, help="reps of each bench (stop_latency: see below)")
    parser.add_argument("--stop-samples", type=int, default=20, help="pauses stop_latency measures")
    parser.add_argument("--only", nargs="+", choices=list(BENCHES), help="run only these")
    parser.add_argument("--out", type=Path, help="where results go (default /tmp/det-bench-peers-<time>)")
    parser.add_argument("--peers-dir", default=os.environ.get("PEERS_DIR", str(DEFAULT_PEERS_DIR)))
    parser.add_argument(
        "--peers-python", default=os.environ.get("PY", str(Path.home() / "peers-venv/bin/python"))
    )
    parser.add_argument("--table", type=Path, metavar="DIR", help="only print the table of an earlier run")
    args = parser.parse_args()
    if args.table:
        print(table(load(args.table)))
        return
    out = args.out or Path(f"/tmp/det-bench-peers-{time.strftime('%Y%m%d-%H%M%S')}")
    out.mkdir(parents=True, exist_ok=True)
    for name in args.only or list(BENCHES):
        run_bench(name, args, out)
    print(f"\nresults in {out}\n")
    print(table(load(out)))


if __name__ == "__main__":
    main()
