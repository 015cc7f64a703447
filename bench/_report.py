"""Shared bits of the benchmarks compared with the peers (bench/peers.py): waiting for a quiet
machine before a measurement, and one JSON line of figures per benchmark, in the shape the
peers' scripts print (median of the reps at the top level, every rep under "runs")."""

import json
import math
import os
import statistics
import sys
import time
from typing import Any

TCK = os.sysconf("SC_CLK_TCK")


def _cpu_ticks() -> list[int]:
    with open("/proc/stat") as stat:
        return [int(x) for x in stat.readline().split()[1:]]


def _busy_cores(dt: float = 1.0) -> float:
    def snap() -> tuple[int, int]:
        v = _cpu_ticks()
        return sum(v), v[3] + v[4]  # total, idle + iowait

    (t0, i0) = snap()
    time.sleep(dt)
    (t1, i1) = snap()
    return (os.cpu_count() or 1) * (1 - (i1 - i0) / max(1, t1 - t0))


def wait_for_quiet(max_wait: float = 45.0, threshold: float = 0.3) -> float:
    """As the peers' _util.py does before each rep: wait (bounded) for 3 consecutive 1 s
    samples under `threshold` busy cores. Returns the seconds waited."""
    start, calm = time.time(), 0
    while time.time() - start < max_wait and calm < 3:
        calm = calm + 1 if _busy_cores() < threshold else 0
    return time.time() - start


def busy_cpu_s() -> float:
    """CPU-seconds the whole machine spent non-idle since boot (all cores)."""
    v = _cpu_ticks()
    return (sum(v[:8]) - v[3] - v[4]) / TCK


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100): with 20 samples, p99 is the largest."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def log(message: str) -> None:
    print(f"# {message}", file=sys.stderr, flush=True)


def emit(bench: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Prints and returns {"bench", "reps", <median of each numeric figure>, ..., "runs"}."""
    numeric = [k for k, v in runs[0].items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    result: dict[str, Any] = {"bench": bench, "reps": len(runs)}
    for key in numeric:
        values = [r[key] for r in runs if isinstance(r.get(key), (int, float))]
        result[key] = round(statistics.median(values), 4) if values else None
    for key, value in runs[0].items():
        if key not in numeric:
            result[key] = value
    result["runs"] = runs
    print(json.dumps(result), flush=True)
    return result
