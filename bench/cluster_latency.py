"""Figures of a local cluster, as a user meets them (median of 5 each):

- `det --help` and `det experiment list` cold start (a fresh process each);
- from `det experiment create` returning to the trial's first training metric
  being visible through GetTrial (what `det trial describe` shows), for a
  script that reports at once.

Starts its own cluster in a temporary folder, prints the figures, stops it.
Usage: python bench/cluster_latency.py [--runs 5]
"""

import argparse
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from _cluster import created_experiment_id, det, local_cluster

from determined.common.states import TERMINAL_STATES

TRAIN_PY = textwrap.dedent(
    """
    import determined as det
    with det.core.init() as core_context:
        core_context.train.report_training_metrics(steps_completed=1, metrics={"loss": 1.0})
    """
)
CONFIG = "entrypoint: python3 train.py\nsearcher: {name: single, metric: loss, max_length: {batches: 1}}\n"


def det_script() -> str:
    return str(Path(sys.executable).parent / "det")


def cold_start(env: dict[str, str], args: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([det_script(), *args], env=env, capture_output=True, check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def first_metric_latency(env: dict[str, str], folder: Path, runs: int) -> tuple[float, float]:
    """Medians from `det experiment create` returning, and from invoking it."""
    import grpc

    from determined.proto import api_pb2, api_pb2_grpc

    stub = api_pb2_grpc.DeterminedStub(grpc.insecure_channel(env["DET_MASTER"]))
    times, invoked_times = [], []
    for _ in range(runs):
        invoked = time.perf_counter()
        out = det(env, "experiment", "create", str(folder / "const.yaml"), str(folder))
        start = time.perf_counter()
        experiment_id = created_experiment_id(out)
        while True:
            trials = stub.GetExperimentTrials(api_pb2.GetExperimentTrialsRequest(experiment_id=experiment_id))
            if trials.trials:
                trial = stub.GetTrial(api_pb2.GetTrialRequest(trial_id=trials.trials[0].id)).trial
                if trial.latest_training.group:
                    break
            time.sleep(0.005)
        times.append(time.perf_counter() - start)
        invoked_times.append(time.perf_counter() - invoked)
        wait_until_ended(stub, experiment_id)
    return statistics.median(times), statistics.median(invoked_times)


def wait_until_ended(stub: object, experiment_id: int) -> None:
    """Each run starts on an idle cluster, so no trial waits for a slot."""
    from determined.proto import api_pb2

    request = api_pb2.GetExperimentRequest(experiment_id=experiment_id)
    while stub.GetExperiment(request).experiment.state not in TERMINAL_STATES:  # type: ignore[attr-defined]
        time.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    with local_cluster() as cluster, tempfile.TemporaryDirectory() as folder:
        env = cluster.env
        (Path(folder) / "train.py").write_text(TRAIN_PY)
        (Path(folder) / "const.yaml").write_text(CONFIG)
        print(f"det --help cold start:            {cold_start(env, ['--help'], runs) * 1000:7.0f} ms")
        print(
            f"det experiment list cold start:   {cold_start(env, ['experiment', 'list'], runs) * 1000:7.0f} ms"
        )
        returned, invoked = first_metric_latency(env, Path(folder), runs)
        print(f"create returned -> first metric:  {returned * 1000:7.0f} ms")
        print(f"create invoked  -> first metric:  {invoked * 1000:7.0f} ms")


if __name__ == "__main__":
    main()
