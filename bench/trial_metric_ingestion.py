"""Metric ingestion as a user meets it: one trial on a local cluster calls
`core_context.train.report_training_metrics` in a tight loop with 10 metrics
per call. Prints, per run, how long one call blocks the training loop (median
and p99, measured inside the trial) and the metric values per second that
reach the PostgreSQL read model (from the loop's first call until the last
row is there); then the medians over the runs.

Usage: python bench/trial_metric_ingestion.py [--runs 5] [--reports 20000]
"""

import argparse
import asyncio
import json
import statistics
import tempfile
import textwrap
import time
from pathlib import Path

import asyncpg
from _cluster import created_experiment_id, det, local_cluster

VALUES_PER_REPORT = 10
TRAIN_PY = textwrap.dedent(
    """
    import json, statistics, sys, time
    import determined as det

    reports = int(sys.argv[1])
    metrics = {f"metric_{i}": 0.5 * i for i in range(10)}
    with det.core.init() as core_context:
        report = core_context.train.report_training_metrics
        blocked = []
        started = time.time()
        for step in range(1, reports + 1):
            before = time.perf_counter()
            report(steps_completed=step, metrics=metrics)
            blocked.append(time.perf_counter() - before)
        blocked.sort()
        print("BENCH " + json.dumps({"started": started, "median_us": blocked[len(blocked) // 2] * 1e6,
                                     "p99_us": blocked[int(len(blocked) * 0.99)] * 1e6}), flush=True)
    """
)


async def wait_for_rows(database_url: str, experiment_id: int, reports: int) -> float:
    """The wall time at which all of the experiment's metric rows are in PostgreSQL."""
    connection = await asyncpg.connect(database_url)
    query = (
        "SELECT count(*) FROM read_model.metrics m JOIN read_model.trials t ON t.id = m.trial_id "
        "WHERE t.experiment_id = $1"
    )
    try:
        while await connection.fetchval(query, experiment_id) < reports:
            await asyncio.sleep(0.01)
        return time.time()
    finally:
        await connection.close()


def trial_figures(env: dict[str, str], experiment_id: int) -> dict[str, float]:
    described = json.loads(det(env, "experiment", "describe", str(experiment_id), "--json"))
    logs = det(env, "trial", "logs", str(described["trials"][0]["id"]))
    line = next(line for line in logs.splitlines() if "BENCH " in line)
    return dict(json.loads(line.split("BENCH ", 1)[1]))


def one_run(
    cluster_env: dict[str, str], database_url: str, folder: Path, reports: int
) -> tuple[float, float, float]:
    experiment_id = created_experiment_id(
        det(cluster_env, "experiment", "create", str(folder / "const.yaml"), str(folder))
    )
    finished = asyncio.run(wait_for_rows(database_url, experiment_id, reports))
    figures = trial_figures(cluster_env, experiment_id)
    rate = reports * VALUES_PER_REPORT / (finished - figures["started"])
    print(
        f"  run: {rate:10,.0f} values/s end to end; one call blocks "
        f"{figures['median_us']:.1f} µs median, {figures['p99_us']:.1f} µs p99"
    )
    return rate, figures["median_us"], figures["p99_us"]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--reports", type=int, default=20_000)
    options = parser.parse_args()
    config = (
        f"entrypoint: python3 train.py {options.reports}\n"
        "searcher: {name: single, metric: loss, max_length: {batches: 1}}\n"
    )
    with local_cluster() as cluster, tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "train.py").write_text(TRAIN_PY)
        (Path(folder) / "const.yaml").write_text(config)
        runs = [
            one_run(cluster.env, cluster.database_url, Path(folder), options.reports)
            for _ in range(options.runs)
        ]
    rates, medians, p99s = zip(*runs, strict=True)
    print(f"metric values/s to PostgreSQL (median of {options.runs}): {statistics.median(rates):,.0f}")
    print(
        f"one report_training_metrics call blocks: {statistics.median(medians):.1f} µs median, "
        f"{statistics.median(p99s):.1f} µs p99"
    )


if __name__ == "__main__":
    main()
