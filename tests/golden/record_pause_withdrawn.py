"""Records tests/golden/pause_withdrawn.jsonl from a real local cluster: a `single` trial
whose experiment is paused and activated again before the trial acts on the stop, so the
pause's stop is withdrawn (AllocationStopWithdrawn) and the trial completes in its first run.

The trial asks should_preempt() only once, PAUSE_WINDOW_S after its first report; the
recording pauses and activates within that window and checks that the log holds the
withdrawal and no acknowledgement. Run from the repository root:
`python tests/golden/record_pause_withdrawn.py`.
"""

import json
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

GOLDEN = Path(__file__).resolve().parent
sys.path.insert(0, str(GOLDEN.parent))

from support.e2e_cluster import Cluster, started_cluster, wait_for  # noqa: E402 - after the path insert

PAUSE_WINDOW_S = 15
ENVELOPE_KEYS = {
    "sequence",
    "event_id",
    "aggregate",
    "occurred_at_ns",
    "actor",
    "correlation_id",
    "causation_id",
}

TRAIN_PY = textwrap.dedent(
    f"""
    import time
    import determined as det

    with det.core.init() as core_context:
        core_context.train.report_training_metrics(steps_completed=1, metrics={{"loss": 1.0}})
        time.sleep({PAUSE_WINDOW_S})
        if core_context.preempt.should_preempt():
            print("preempted", flush=True)
        else:
            core_context.train.report_validation_metrics(steps_completed=2, metrics={{"loss": 0.5}})
    """
)

CONFIG = json.dumps(
    {
        "name": "withdrawn",
        "entrypoint": "python3 train.py",
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 2}},
        "max_restarts": 0,
    }
)


def record(cluster: Cluster, context: Path) -> None:
    (context / "train.py").write_text(TRAIN_PY)
    experiment_id = cluster.create(context, CONFIG)
    [trial] = wait_for(lambda: cluster.trials(experiment_id), "the trial")
    describe = ("trial", "describe", str(trial["id"]))
    wait_for(lambda: cluster.json(*describe)["trial"]["total_batches"] >= 1, "the first report", 120)
    cluster.det("experiment", "pause", str(experiment_id))
    time.sleep(1)  # the lifecycle asks the run to stop
    cluster.det("experiment", "activate", str(experiment_id))
    wait_for(lambda: cluster.experiment_state(experiment_id) == "COMPLETED", "the end", 180)


def main() -> None:
    with started_cluster("det-golden") as cluster, tempfile.TemporaryDirectory() as context:
        record(cluster, Path(context))
        log = subprocess.run(
            [sys.executable, "-m", "services.eventlog", "--nats-url", f"nats://127.0.0.1:{cluster.nats_port}",
             "--credentials", str(cluster.data_dir / "credentials.json")],
            check=True, capture_output=True, text=True,
        ).stdout  # fmt: skip
    kinds = [payload_kind(json.loads(line)) for line in log.splitlines()]
    assert kinds.count("allocation_stop_withdrawn") == 1, kinds
    assert "allocation_stop_acknowledged" not in kinds and kinds.count("allocation_requested") == 1, kinds
    (GOLDEN / "pause_withdrawn.jsonl").write_text(log)


def payload_kind(line: dict[str, object]) -> str:
    return next(key for key in line if key not in ENVELOPE_KEYS)


if __name__ == "__main__":
    main()
