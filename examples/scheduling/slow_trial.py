"""A trial that trains slowly on purpose, to watch the scheduler share slots: each step
sleeps `step_seconds`, a checkpoint is stored every `checkpoint_every` steps, and when the
cluster asks the trial to stop (preemption, pause, a lost agent's trial running again) it
stores one more checkpoint and returns; the next run resumes from it.

Runs unchanged off-cluster (`python3 slow_trial.py`): then nothing is reported."""

import json
import logging
import time
from pathlib import Path

import determined as det

logger = logging.getLogger("scheduling")

DEFAULTS = {"x": 0.5, "steps": 30, "step_seconds": 0.2, "checkpoint_every": 5}


def main(core_context: det.core.Context, hparams: dict[str, float]) -> None:
    info = det.get_cluster_info()
    start = 0
    if info is not None and info.latest_checkpoint is not None:
        with core_context.checkpoint.restore_path(info.latest_checkpoint) as path:
            start = json.loads((Path(path) / "state.json").read_text())["steps_completed"]
    logger.info("starting at step %d", start)
    steps, every = int(hparams["steps"]), int(hparams["checkpoint_every"])
    for step in range(start + 1, steps + 1):
        time.sleep(float(hparams["step_seconds"]))
        core_context.train.report_training_metrics(steps_completed=step, metrics={"loss": 1.0 / step})
        stopping = core_context.preempt.should_preempt()
        if step % every == 0 or stopping:
            save(core_context, step)
        if stopping:
            logger.info("stopping at step %d: the cluster asked; the trial resumes from here", step)
            return
    core_context.train.report_validation_metrics(
        steps_completed=steps, metrics={"validation_loss": float(hparams["x"])}
    )
    logger.info("done after %d steps", steps)


def save(core_context: det.core.Context, step: int) -> None:
    with core_context.checkpoint.store_path({"steps_completed": step}) as (path, _storage_id):
        (Path(path) / "state.json").write_text(json.dumps({"steps_completed": step}))


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    info = det.get_cluster_info()
    with det.core.init() as core_context:
        main(core_context, {**DEFAULTS, **(info.trial.hparams if info else {})})
