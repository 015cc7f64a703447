"""Determined 0.38.1's own `det` and SDK, unchanged, against a local cluster's HTTP API: trials,
their logs and workloads, checkpoints and their downloads (directly from shared_fs storage and
through the master's .tar.gz), and `det e wait`'s exit code (issue 22 §1; users, the cluster and
the experiment verbs are test_determined_cli_core.py's)."""

import json
import re
import subprocess
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.determined_client import TIMEOUT_S, DeterminedCluster, required_venv
from support.e2e_cluster import wait_for

pytestmark = pytest.mark.e2e

# Prints its lines slowly enough that `det trial logs -f` starts while it runs.
TRAIN_PY = textwrap.dedent(
    """
    import json
    import time

    import determined as det

    with det.core.init() as core_context:
        for step in range(1, 4):
            print(f"INFO: step {step}", flush=True)
            core_context.train.report_training_metrics(steps_completed=step, metrics={"loss": 1.0 / step})
        core_context.train.report_validation_metrics(steps_completed=3, metrics={"loss": 0.25})
        with core_context.checkpoint.store_path({"steps_completed": 3}) as (path, _):
            (path / "weights.json").write_text(json.dumps({"w": 2.5}))
            (path / "sub").mkdir()
            (path / "sub" / "more.txt").write_text("more")
        print("WARNING: almost done", flush=True)
        time.sleep(2)
    print("INFO: done", flush=True)
    """
)
CONFIG = textwrap.dedent(
    """
    name: {name}
    entrypoint: {entrypoint}
    hyperparameters:
      learning_rate: 0.5
    searcher:
      name: single
      metric: loss
    max_restarts: 0
    """
)
# A trial that reports using a checkpoint, and its inference metrics.
USES_PY = textwrap.dedent(
    """
    import types

    import determined as det

    with det.core.init() as core_context:
        core_context.experimental.report_task_using_checkpoint(types.SimpleNamespace(uuid={uuid!r}))
        core_context.train.report_metrics("inference", steps_completed=1, metrics={{"accuracy": 0.9}})
    """
)
# A line as Determined's `det trial logs` prints it: [time] container [rank=R] || text
LOG_LINE = re.compile(r"^\[\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z\] \S{1,8} (\[rank=\d+\] )?\|\| ")


@dataclass(frozen=True)
class Trained:
    experiment_id: int
    trial_id: int
    followed: str  # what `det trial logs -f` printed while the trial ran
    uuid: str  # its checkpoint
    described: dict[str, Any]  # its `det trial describe T --json`


def create(
    client: DeterminedCluster, name: str, entrypoint: str = "python3 train.py", script: str = TRAIN_PY
) -> int:
    folder = client.home / name
    folder.mkdir()
    (folder / "train.py").write_text(script)
    (folder / "config.yaml").write_text(CONFIG.format(name=name, entrypoint=entrypoint))
    output = client.det("experiment", "create", str(folder / "config.yaml"), str(folder))
    line = next(line for line in output.splitlines() if line.startswith("Created experiment "))
    return int(line.split()[-1])


def trial_of(client: DeterminedCluster, experiment_id: int) -> int:
    trials = wait_for(lambda: client.cluster.trials(experiment_id), f"experiment {experiment_id}'s trial")
    return int(trials[0]["id"])


@pytest.fixture(scope="module")
def trained(determined_cluster: DeterminedCluster) -> Iterator[Trained]:
    """One experiment run to its end, its trial's logs followed (-f) meanwhile."""
    experiment_id = create(determined_cluster, "compat-trials")
    trial_id = trial_of(determined_cluster, experiment_id)
    command = [str(required_venv() / "bin" / "det"), "trial", "logs", "-f", str(trial_id)]
    with subprocess.Popen(
        command, env=determined_cluster.env(), cwd=determined_cluster.home, stdout=subprocess.PIPE, text=True
    ) as following:
        waited = determined_cluster.det_run(
            "experiment", "wait", str(experiment_id), "--polling-interval", "1"
        )
        followed, _ = following.communicate(timeout=TIMEOUT_S)
    assert waited.returncode == 0, waited.stdout + waited.stderr  # COMPLETED: exit 0
    described = json.loads(determined_cluster.det("trial", "describe", str(trial_id), "--json"))
    [uuid] = [w["checkpoint"]["uuid"] for w in described["workloads"] if w["checkpoint"]]
    yield Trained(experiment_id, trial_id, followed, uuid, described)


def kind(workload: dict[str, Any]) -> tuple[str, int]:
    """A v1WorkloadContainer's kind (the one of its fields set) and its batches."""
    [(name, shown)] = [(name, shown) for name, shown in workload.items() if shown]
    return name, shown["totalBatches"]


def test_a_trial_is_described_with_its_workloads(
    determined_cluster: DeterminedCluster, trained: Trained
) -> None:
    described = trained.described
    assert described["trial"]["state"] == "STATE_COMPLETED"
    assert described["trial"]["hparams"] == {"learning_rate": 0.5}
    assert [kind(w) for w in described["workloads"]] == [
        ("training", 1),
        ("training", 2),
        ("training", 3),
        ("validation", 3),
        ("checkpoint", 3),
    ]
    assert described["workloads"][3]["validation"]["metrics"]["avgMetrics"] == {"loss": 0.25}
    table = determined_cluster.det("trial", "describe", str(trained.trial_id))
    assert "Workloads:" in table and trained.uuid in table and "COMPLETED" in table


def test_a_trial_logs_are_read_as_determined_prints_them(
    determined_cluster: DeterminedCluster, trained: Trained
) -> None:
    def logs(*flags: str) -> list[str]:
        shown = determined_cluster.det("trial", "logs", str(trained.trial_id), *flags).splitlines()
        return [line for line in shown if LOG_LINE.match(line)]

    every = logs()
    texts = [line.split(" || ", 1)[1] for line in every]
    assert [t for t in texts if t.startswith(("INFO: step", "WARNING", "INFO: done"))] == [
        "INFO: step 1",
        "INFO: step 2",
        "INFO: step 3",
        "WARNING: almost done",
        "INFO: done",
    ]
    followed = [line for line in trained.followed.splitlines() if LOG_LINE.match(line)]
    assert followed == every  # -f: every line, then it ended with the trial
    assert logs("--tail", "2") == every[-2:]
    # Its other filters, as its `det trial logs` sends them (one process: its start is slow).
    chosen = determined_cluster.sdk(
        f"""
        import json
        from determined.common import api
        from determined.common.api import bindings
        from determined.experimental import Determined

        session, trial = Determined()._session, {trained.trial_id}
        print(json.dumps({{
            "head": [log.message for log in api.trial_logs(session, trial, head=1)],
            "warned": [log.log for log in api.trial_logs(session, trial, min_level=bindings.v1LogLevel.WARNING)],
            "levels": sorted({{log.level.value for log in api.trial_logs(session, trial, search_text="almost")}}),
            "every": [log.message for log in api.trial_logs(session, trial)],
        }}))
        try:
            list(api.trial_logs(session, 999999))
        except Exception as error:
            print(error)
        """
    ).splitlines()
    answer = json.loads(chosen[-2])
    assert answer["head"] == [every[0] + "\n"] and answer["every"] == [line + "\n" for line in every]
    assert "WARNING: almost done" in answer["warned"] and not [
        t for t in answer["warned"] if t.startswith("INFO")
    ]
    assert answer["levels"] == ["LOG_LEVEL_WARNING"]
    assert "trial 999999 not found" in chosen[-1]


def test_checkpoints_are_listed_described_and_downloaded(
    determined_cluster: DeterminedCluster, trained: Trained, tmp_path: Path
) -> None:
    listed = determined_cluster.det("experiment", "list-checkpoints", str(trained.experiment_id))
    assert trained.uuid in listed and "COMPLETED" in listed and "0.25" in listed
    described = determined_cluster.det("checkpoint", "describe", trained.uuid)
    assert trained.uuid in described and '"steps_completed": 3' in described
    determined_cluster.det("checkpoint", "download", trained.uuid, "-o", str(tmp_path / "direct"))
    assert json.loads((tmp_path / "direct" / "weights.json").read_text()) == {"w": 2.5}
    assert (tmp_path / "direct" / "sub" / "more.txt").read_text() == "more"


def test_its_sdk_reads_trials_logs_and_the_best_checkpoint(
    determined_cluster: DeterminedCluster, trained: Trained, tmp_path: Path
) -> None:
    shown = determined_cluster.sdk(
        f"""
        import json
        import warnings
        from determined.experimental import client
        from determined.common.experimental.checkpoint import DownloadMode

        warnings.simplefilter("ignore")  # its own deprecation notes (top_checkpoint, logs)
        experiment = client.get_experiment({trained.experiment_id})
        best = experiment.top_checkpoint()
        path = best.download({str(tmp_path / "best")!r})
        best.download({str(tmp_path / "through-master")!r}, mode=DownloadMode.MASTER)  # the .tar.gz
        trial = client.get_trial({trained.trial_id})
        print(json.dumps({{
            "best": best.uuid,
            "path": path,
            "trials": [t.id for t in experiment.list_trials()],
            "hparams": trial.hparams,
            "logs": sum(1 for line in trial.logs() if "|| INFO: step" in line),
            "checkpoints": [c.uuid for c in trial.list_checkpoints()],
        }}))
        try:
            client.get_checkpoint("00000000-0000-0000-0000-000000000000")
        except Exception as error:
            print(error)
        """
    ).splitlines()
    assert json.loads(shown[-2]) == {
        "best": trained.uuid,
        "path": str(tmp_path / "best"),
        "trials": [trained.trial_id],
        "hparams": {"learning_rate": 0.5},
        "logs": 3,
        "checkpoints": [trained.uuid],
    }
    assert "checkpoint 00000000-0000-0000-0000-000000000000 not found" in shown[-1]
    for folder in ("best", "through-master"):
        assert json.loads((tmp_path / folder / "weights.json").read_text()) == {"w": 2.5}, folder
        assert (tmp_path / folder / "sub" / "more.txt").read_text() == "more", folder


def test_its_sdk_streams_metrics_and_edits_checkpoint_metadata(
    determined_cluster: DeterminedCluster, trained: Trained
) -> None:
    shown = determined_cluster.sdk(
        f"""
        import json
        from determined.experimental import client

        trial = client.get_trial({trained.trial_id})
        checkpoint = client.get_checkpoint({trained.uuid!r})
        before = checkpoint.metadata
        checkpoint.add_metadata({{"approved": True}})
        added = client.get_checkpoint({trained.uuid!r}).metadata
        checkpoint.remove_metadata(["approved"])
        print(json.dumps({{
            "training": [(m.steps_completed, m.metrics) for m in trial.iter_metrics("training")],
            "validation": [
                (m.trial_id, m.group, m.metrics) for m in client.iter_trials_metrics([trial.id], "validation")
            ],
            "added": added == dict(before, approved=True),
            "removed": client.get_checkpoint({trained.uuid!r}).metadata == before,
        }}))
        """
    ).splitlines()
    assert json.loads(shown[-1]) == {
        "training": [[1, {"loss": 1.0}], [2, {"loss": 0.5}], [3, {"loss": 1.0 / 3}]],
        "validation": [[trained.trial_id, "validation", {"loss": 0.25}]],
        "added": True,
        "removed": True,
    }


def test_its_sdk_reads_the_metrics_of_a_checkpoint_users(
    determined_cluster: DeterminedCluster, trained: Trained
) -> None:
    experiment_id = create(determined_cluster, "compat-uses", script=USES_PY.format(uuid=trained.uuid))
    waited = determined_cluster.det_run("experiment", "wait", str(experiment_id), "--polling-interval", "1")
    assert waited.returncode == 0, waited.stdout + waited.stderr
    shown = determined_cluster.sdk(
        f"""
        import json
        from determined.experimental import client

        checkpoint = client.get_checkpoint({trained.uuid!r})
        print(json.dumps([(m.group, m.steps_completed, m.metrics) for m in checkpoint.get_metrics("inference")]))
        """
    ).splitlines()
    assert json.loads(shown[-1]) == [["inference", 1, {"accuracy": 0.9}]]


def test_wait_exits_1_unless_the_experiment_completed(determined_cluster: DeterminedCluster) -> None:
    experiment_id = create(determined_cluster, "compat-fails", entrypoint="python3 -c 'raise SystemExit(3)'")
    waited = determined_cluster.det_run("experiment", "wait", str(experiment_id), "--polling-interval", "1")
    assert waited.returncode == 1, waited.stdout + waited.stderr
    assert determined_cluster.cluster.experiment_state(experiment_id) == "ERROR"
