"""Records a golden log of an experiment that is deleted: a `single` trial that reports
metrics, writes a TensorBoard file and saves a checkpoint, then `det experiment delete`
once it has COMPLETED, until it is gone from storage (ExperimentDeleted).

Run from the repository root: `python tests/golden/record_experiment_deleted.py FILE.jsonl`
(FILE in tests/golden/). Recorded with the code of 744c1bb, before TensorboardFilesDeleted
existed, it wrote experiment_deleted_before_tensorboards.jsonl; with today's code,
experiment_deleted.jsonl.
"""

import json
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

GOLDEN = Path(__file__).resolve().parent
sys.path.insert(0, str(GOLDEN.parent))

from support.e2e_cluster import Cluster, started_cluster, wait_for  # noqa: E402 - after the path insert

TRAIN_PY = textwrap.dedent(
    """
    import determined as det

    with det.core.init() as core_context:
        core_context.train.report_training_metrics(steps_completed=1, metrics={"loss": 1.0})
        events = core_context.train.get_tensorboard_path() / "events.out.tfevents.1.golden"
        events.write_bytes(b"tfevents")
        with core_context.checkpoint.store_path({"steps_completed": 1}) as (path, _):
            (path / "weights").write_text("1")
        core_context.train.report_validation_metrics(steps_completed=1, metrics={"loss": 0.5})
    """
)

CONFIG = json.dumps(
    {
        "name": "deleted",
        "entrypoint": "python3 train.py",
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}},
        "max_restarts": 0,
    }
)
ENVELOPE_KEYS = {
    "sequence",
    "event_id",
    "aggregate",
    "occurred_at_ns",
    "actor",
    "correlation_id",
    "causation_id",
}


def record(cluster: Cluster, context: Path) -> None:
    (context / "train.py").write_text(TRAIN_PY)
    experiment_id = cluster.create(context, CONFIG)
    wait_for(lambda: cluster.experiment_state(experiment_id) == "COMPLETED", "the end", 180)
    cluster.det("experiment", "delete", str(experiment_id), "--yes")
    listed = lambda: [e["id"] for e in cluster.json("experiment", "list", "--all")]  # noqa: E731
    wait_for(lambda: experiment_id not in listed(), "the experiment gone", 120)


def main(name: str) -> None:
    with started_cluster("det-golden") as cluster, tempfile.TemporaryDirectory() as context:
        record(cluster, Path(context))
        log = subprocess.run(
            [sys.executable, "-m", "services.eventlog", "--nats-url", f"nats://127.0.0.1:{cluster.nats_port}",
             "--credentials", str(cluster.data_dir / "credentials.json")],
            check=True, capture_output=True, text=True,
        ).stdout  # fmt: skip
    kinds = [payload_kind(json.loads(line)) for line in log.splitlines()]
    assert kinds.count("checkpoint_deleted") == 1 and kinds.count("experiment_deleted") == 1, kinds
    (GOLDEN / name).write_text(log)
    print(f"{name}: {len(kinds)} events, TensorboardFilesDeleted: {'tensorboard_files_deleted' in kinds}")


def payload_kind(line: dict[str, object]) -> str:
    return next(key for key in line if key not in ENVELOPE_KEYS)


if __name__ == "__main__":
    main(sys.argv[1])
