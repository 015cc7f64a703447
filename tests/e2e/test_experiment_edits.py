"""An ended experiment's edits on a real cluster, through the real CLI: labels,
`download --top-n` (the best checkpoints by the searcher metric or another),
a fork that runs its parent's context, and archiving (refused while it runs)."""

import textwrap
from pathlib import Path

import pytest
from support.e2e_cluster import Cluster, created_id, wait_for

pytestmark = pytest.mark.e2e

# Three checkpoints, each validated: the best by validation_loss is at step 20, then 30, then 10
# (which GC deletes once the experiment ends: neither its trial's best nor its latest).
TRAIN_PY = textwrap.dedent(
    """
    import determined as det

    with det.core.init() as core_context:
        for steps, loss in ((10, 0.3), (20, 0.1), (30, 0.2)):
            core_context.train.report_validation_metrics(
                steps_completed=steps, metrics={"validation_loss": loss, "accuracy": 1 - loss}
            )
            with core_context.checkpoint.store_path({"steps_completed": steps}) as (path, _):
                (path / "weights.txt").write_text(str(steps))
            core_context.train.report_progress(steps / 30)
    """
)
CONST_YAML = textwrap.dedent(
    """
    name: edits
    entrypoint: python3 train.py
    searcher: {name: single, metric: validation_loss, max_length: {batches: 30}}
    max_restarts: 0
    """
)


def completed(cluster: Cluster, experiment_id: int) -> None:
    wait_for(
        lambda: cluster.experiment_state(experiment_id) == "COMPLETED", f"experiment {experiment_id} to end"
    )


def test_an_ended_experiment_is_labelled_forked_archived_and_its_best_checkpoints_downloaded(
    cluster: Cluster, tmp_path: Path
) -> None:
    context = tmp_path / "context"
    context.mkdir()
    (context / "train.py").write_text(TRAIN_PY)
    config = tmp_path / "const.yaml"
    config.write_text(CONST_YAML)
    experiment_id = created_id(cluster.det("e", "create", str(config), str(context)).stdout)
    completed(cluster, experiment_id)
    eid = str(experiment_id)

    cluster.det("e", "label", "add", eid, "baseline")
    cluster.det("e", "label", "add", eid, "v1")
    assert (
        cluster.det("e", "label", "remove", eid, "v1").stdout == f"Removed label 'v1' from experiment {eid}\n"
    )
    assert cluster.json("e", "describe", eid)["experiment"]["labels"] == ["baseline"]

    steps = {c["uuid"]: c["steps_completed"] for c in cluster.json("e", "lc", eid)}
    best = cluster.det(
        "e", "download", eid, "--top-n", "2", "-o", str(tmp_path / "best"), "-q"
    ).stdout.split()
    assert [steps[Path(path).name] for path in best] == [20, 30]
    assert [(Path(path) / "weights.txt").read_text() for path in best] == ["20", "30"]
    most_accurate = cluster.det(
        "e", "download", eid, "--sort-by", "accuracy", "--smaller-is-better", "false",
        "-o", str(tmp_path / "accurate"), "-q",
    ).stdout.split()  # fmt: skip
    assert [steps[Path(path).name] for path in most_accurate] == [20]
    refused = cluster.det("e", "download", eid, "--sort-by", "accuracy", check=False)
    assert refused.returncode == 1 and "--sort-by and --smaller-is-better go together" in refused.stderr

    fork_id = created_id(cluster.det("e", "create", str(config), "--parent", eid, "--paused").stdout)
    archived_too_soon = cluster.det("e", "archive", str(fork_id), check=False)
    assert archived_too_soon.returncode == 1
    assert (
        f"Experiment {fork_id} is PAUSED: only an ended experiment can be archived"
        in archived_too_soon.stderr
    )
    cluster.det("e", "activate", str(fork_id))
    completed(cluster, fork_id)  # it ran its parent's train.py: no context was sent
    assert cluster.json("e", "describe", str(fork_id))["experiment"]["parent_id"] == experiment_id
    assert cluster.json("e", "lc", str(fork_id))

    assert cluster.det("e", "archive", eid).stdout == f"Archived experiment {eid}\n"
    assert experiment_id not in [e["id"] for e in cluster.json("e", "list")]
    assert experiment_id in [e["id"] for e in cluster.json("e", "list", "--all")]
    missing = cluster.det("e", "archive", "987654", check=False)
    assert missing.returncode == 1 and "experiment 987654 not found" in missing.stderr
