"""Adaptive search and stop/resume, end to end (issue 6):

- an `async_halving` experiment (0.38 config: time_metric/max_time) cuts trials at the
  rungs Determined's arithmetic gives, stopping them through should_preempt();
- a seed-era `adaptive_asha` config (`max_length`) whose script loops over
  `core_context.searcher.operations()` gets one operation per rung;
- pausing a running experiment stops its trials at their next check, and activating it
  resumes each from its checkpoint, with every step reported once in what users see;
- `det events explain` gives the chain of a cut trial (its validation, the searcher's cut
  with the numbers, the stop) and of a resumed one (the pause, the activation, run 2).
"""

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from support.e2e_cluster import Cluster, wait_for

pytestmark = pytest.mark.e2e

# Trains in batches of 50 ms, validates every 4 batches with the searcher metric `x`
# (smaller is better) and the time metric `batches`; exits when asked to. After the rung-0
# validation it gives the searcher up to 5 s to cut it before training on, so that a cut
# reaching a loaded machine late still stops the trial short of the top rung.
ASHA_TRAIN_PY = textwrap.dedent(
    """
    import time
    import determined as det

    info = det.get_cluster_info()
    x = info.trial.hparams["x"]
    with det.core.init() as core_context:
        for batch in range(1, 17):
            time.sleep(0.05)
            core_context.train.report_training_metrics(steps_completed=batch, metrics={"loss": x})
            if batch % 4 == 0:
                core_context.train.report_validation_metrics(
                    steps_completed=batch, metrics={"x": x, "batches": batch}
                )
            deadline = time.monotonic() + (5 if batch == 4 else 0)
            stop = core_context.preempt.should_preempt()
            while not stop and time.monotonic() < deadline:
                time.sleep(0.05)
                stop = core_context.preempt.should_preempt()
            if stop:
                print("stopped at batch", batch, flush=True)
                break
    """
)

# The seed-era loop: train to each operation's length, validate, report it completed.
OPERATIONS_TRAIN_PY = textwrap.dedent(
    """
    import determined as det

    info = det.get_cluster_info()
    x = info.trial.hparams["x"]
    with det.core.init() as core_context:
        batch = 0
        for op in core_context.searcher.operations():
            while batch < op.length:
                batch += 1
                core_context.train.report_training_metrics(steps_completed=batch, metrics={"loss": x})
            core_context.train.report_validation_metrics(steps_completed=batch, metrics={"x": x})
            op.report_completed(x)
            print("operation done at", batch, flush=True)
    """
)

# 200 steps of 30 ms; a checkpoint every 20 steps and when asked to stop; resumes from
# the latest checkpoint.
RESUMABLE_TRAIN_PY = textwrap.dedent(
    """
    import time
    import determined as det

    info = det.get_cluster_info()
    start = 0
    with det.core.init() as core_context:
        if info.latest_checkpoint:
            with core_context.checkpoint.restore_path(info.latest_checkpoint) as path:
                start = int((path / "step").read_text())
            print("resumed at", start, flush=True)
        for step in range(start + 1, 201):
            time.sleep(0.03)
            core_context.train.report_training_metrics(steps_completed=step, metrics={"loss": 1 / step})
            stop = core_context.preempt.should_preempt()
            # A first run holds at step 60 until the pause reaches it, however long a loaded
            # machine takes to deliver it: the test pauses trials that are running.
            while not info.latest_checkpoint and step == 60 and not stop:
                time.sleep(0.1)
                stop = core_context.preempt.should_preempt()
            if step % 20 == 0 or stop or step == 200:
                with core_context.checkpoint.store_path({"steps_completed": step}) as (path, _):
                    (path / "step").write_text(str(step))
            if stop:
                print("stopping at", step, flush=True)
                break
        else:
            core_context.train.report_validation_metrics(steps_completed=200, metrics={"loss": 0.005})
    """
)


def config(name: str, searcher: dict[str, Any], **overrides: Any) -> str:
    document: dict[str, Any] = {
        "name": name,
        "entrypoint": "python3 train.py",
        "hyperparameters": {"x": {"type": "int", "minval": 1, "maxval": 1000}},
        "searcher": searcher,
        "max_restarts": 0,
        "preemption_timeout": 30,
    }
    document.update(overrides)
    return json.dumps(document)


def completed(cluster: Cluster, experiment_id: int) -> list[dict[str, Any]]:
    wait_for(lambda: cluster.experiment_state(experiment_id) == "COMPLETED", "the experiment", 180)
    return cluster.trials(experiment_id)


def test_async_halving_cuts_trials_at_the_rungs(cluster: Cluster, tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(ASHA_TRAIN_PY)
    searcher = {
        "name": "async_halving",
        "metric": "x",
        "num_rungs": 2,
        "divisor": 4,
        "max_trials": 6,
        "max_concurrent_trials": 2,
        "time_metric": "batches",
        "max_time": 16,
    }
    experiment_id = cluster.create(tmp_path, config("asha", searcher))
    trials = completed(cluster, experiment_id)

    # Rungs at max(16 / 4, 1) = 4 and 16 batches; every trial ends COMPLETED, either cut
    # at the first rung (stopped through should_preempt before training much further)
    # or run to the top rung.
    assert len(trials) == 6, trials
    assert {t["state"] for t in trials} == {"COMPLETED"}, trials
    cut = [t for t in trials if t["end_reason"].startswith("cut at rung 0 (4 batches): x ")]
    top = [t for t in trials if t["end_reason"].startswith("reached the top rung (16 batches): x ")]
    assert len(cut) + len(top) == 6 and top, trials
    assert all(t["total_batches"] < 16 for t in cut), cut
    assert all(t["total_batches"] == 16 for t in top), top
    # A trial that survived rung 0 was promoted to rung 1 (TrialLengthSet) before its end.
    assert all(t["rung"] == 1 and t["searcher_length"] == 16 for t in top), top
    described = cluster.json("experiment", "describe", str(experiment_id))
    assert described["experiment"]["progress"] == 1.0
    a_cut_trial_is_explained(cluster, cut[-1])


def a_cut_trial_is_explained(cluster: Cluster, trial: dict[str, Any]) -> None:
    """Its creation by the search, its validation at rung 0, the cut with the numbers, the stop."""
    chain, outcome = cluster.explain("trial", trial["id"])
    cut = trial["end_reason"]
    assert "not in the top 1/4 of" in cut, cut
    types = [event_type for _, event_type, _ in chain]
    [created] = [reason for _, event_type, reason in chain if event_type == "trial_created"]
    assert created.startswith("ASHA: a new trial for rung 0 (4 batches)"), created
    stop = types.index("trial_stop_requested")
    depth = chain[stop][0]
    assert chain[stop - 1][:2] == (depth - 1, "trial_validation_reported"), chain
    assert chain[stop][2] == cut and chain[stop + 1] == (depth + 1, "allocation_stop_requested", cut), chain
    assert ("allocation_requested" in types) and ("allocation_exited" in types), chain
    [ended] = [(d, reason) for d, event_type, reason in chain if event_type == "trial_ended"]
    assert ended[1] == cut, chain
    assert outcome == f"stopped: {cut}"


def test_seed_era_adaptive_asha_yields_one_operation_per_rung(cluster: Cluster, tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(OPERATIONS_TRAIN_PY)
    searcher = {
        "name": "adaptive_asha",
        "metric": "x",
        "mode": "aggressive",
        "max_trials": 4,
        "max_concurrent_trials": 2,
        "max_length": {"batches": 16},
    }
    experiment_id = cluster.create(tmp_path, config("asha-operations", searcher))
    trials = completed(cluster, experiment_id)

    # aggressive: one bracket of min(5, floor(ln 16 / ln 4) + 1, floor(ln 4 / ln 4) + 1) = 2 rungs,
    # at 4 and 16 batches. A trial waits for the searcher's decision after each operation, so
    # it trains exactly to its last rung.
    assert len(trials) == 4 and {t["state"] for t in trials} == {"COMPLETED"}, trials
    for trial in trials:
        logs = cluster.logs(trial["id"])
        if trial["end_reason"].startswith("cut at rung 0 (4 batches)"):
            assert trial["total_batches"] == 4 and "operation done at 16" not in logs, trial
        else:
            assert trial["end_reason"].startswith("reached the top rung (16 batches)"), trial
            assert "operation done at 4" in logs and "operation done at 16" in logs, logs
            assert trial["total_batches"] == 16


def test_pause_and_activate_resume_every_trial_from_its_checkpoint(cluster: Cluster, tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(RESUMABLE_TRAIN_PY)
    searcher = {"name": "random", "metric": "loss", "max_trials": 2, "max_concurrent_trials": 2}
    experiment_id = cluster.create(tmp_path, config("paused", searcher))

    def trained_a_while() -> list[dict[str, Any]]:
        trials = cluster.trials(experiment_id)
        return trials if len(trials) == 2 and all(t["total_batches"] >= 30 for t in trials) else []

    trials = wait_for(trained_a_while, "both trials to train a while")

    assert cluster.det("experiment", "pause", str(experiment_id)).returncode == 0
    wait_for(  # each checkpoints and exits; a bound against a hang on a loaded machine, not a timing
        lambda: all(t["state"] == "PAUSED" for t in cluster.trials(experiment_id)),
        "every trial to stop",
        deadline_s=120,
    )
    for trial in trials:
        assert "stopping at" in cluster.logs(trial["id"])

    cluster.det("experiment", "activate", str(experiment_id))
    trials = completed(cluster, experiment_id)

    for trial in trials:
        assert "resumed at" in cluster.logs(trial["id"]), cluster.logs(trial["id"])
        assert trial["restarts"] == 0 and trial["total_batches"] == 200, trial
        steps = cluster.query(
            'SELECT steps_completed FROM read_model.metrics WHERE trial_id = $1 AND "group" = $2'
            " AND NOT superseded",
            trial["id"],
            "training",
        )
        assert sorted(row["steps_completed"] for row in steps) == list(range(1, 201))
        runs = cluster.query(
            "SELECT count(*) AS n FROM read_model.allocations WHERE trial_id = $1", trial["id"]
        )
        assert runs[0]["n"] == 2
    a_resumed_trial_is_explained(cluster, trials[0]["id"])


def a_resumed_trial_is_explained(cluster: Cluster, trial_id: int) -> None:
    """The pause (a user's command) asked its run to stop; the activation asked for run 2."""
    chain, outcome = cluster.explain("trial", trial_id)
    pause = chain.index((1, "allocation_stop_requested", "experiment paused"))
    assert chain[pause - 1][:2] == (0, "experiment_state_changed"), chain
    [activated] = [n for n, (_, event_type, _) in enumerate(chain) if event_type == "allocation_requested"][
        1:
    ]
    assert chain[activated - 1][:2] == (0, "experiment_state_changed") and chain[activated][0] == 1, chain
    resumed = chain[activated][2]
    assert resumed.startswith(f"trial {trial_id} run 2: activated after a pause, from checkpoint "), resumed
    assert "allocation_stop_acknowledged" in [event_type for _, event_type, _ in chain]
    assert outcome == "completed: its code finished"
