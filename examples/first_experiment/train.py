"""A first experiment with Determined's Core API: fits y = 3x + 1 with plain
gradient descent, reports training and validation loss, checkpoints the
weights, and stops early when the cluster asks (pause, preemption).

Runs unchanged off-cluster (`python3 train.py`): then nothing is reported."""

import json
import logging
import random
from pathlib import Path

import determined as det

logger = logging.getLogger("first_experiment")

STEPS = 100
VALIDATE_EVERY = 25


def batch(rng: random.Random, size: int) -> list[tuple[float, float]]:
    points = [rng.uniform(-1.0, 1.0) for _ in range(size)]
    return [(x, 3.0 * x + 1.0 + rng.gauss(0.0, 0.1)) for x in points]


def loss_and_gradient(w: float, b: float, data: list[tuple[float, float]]) -> tuple[float, float, float]:
    errors = [(w * x + b - y, x) for x, y in data]
    loss = sum(error * error for error, _ in errors) / len(errors)
    grad_w = sum(2 * error * x for error, x in errors) / len(errors)
    grad_b = sum(2 * error for error, _ in errors) / len(errors)
    return loss, grad_w, grad_b


def main(core_context: det.core.Context, learning_rate: float, batch_size: int) -> None:
    rng = random.Random(0)
    w, b, start = 0.0, 0.0, 0
    info = det.get_cluster_info()
    latest = info.latest_checkpoint if info else None
    if latest is not None:
        with core_context.checkpoint.restore_path(latest) as path:
            saved = json.loads((path / "weights.json").read_text())
        w, b, start = saved["w"], saved["b"], saved["steps_completed"]
        logger.info("resumed from checkpoint %s at step %d", latest, start)
    for step in range(start + 1, STEPS + 1):
        loss, grad_w, grad_b = loss_and_gradient(w, b, batch(rng, batch_size))
        w, b = w - learning_rate * grad_w, b - learning_rate * grad_b
        core_context.train.report_training_metrics(steps_completed=step, metrics={"loss": loss})
        if step % VALIDATE_EVERY == 0 or step == STEPS:
            validation_loss, _, _ = loss_and_gradient(w, b, batch(random.Random(1), 1000))
            core_context.train.report_validation_metrics(
                steps_completed=step, metrics={"validation_loss": validation_loss, "batches": step}
            )
            logger.info(
                "step %d: loss %.4f, validation_loss %.4f (w=%.3f, b=%.3f)", step, loss, validation_loss, w, b
            )
            save(core_context, w, b, step)
            if core_context.preempt.should_preempt():
                logger.info("stopping at step %d: the cluster asked; the trial resumes from here", step)
                return
    logger.info("done: y = %.3f x + %.3f", w, b)


def save(core_context: det.core.Context, w: float, b: float, step: int) -> None:
    with core_context.checkpoint.store_path({"steps_completed": step}) as (path, _storage_id):
        (Path(path) / "weights.json").write_text(json.dumps({"w": w, "b": b, "steps_completed": step}))


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    info = det.get_cluster_info()
    hparams = info.trial.hparams if info else {"learning_rate": 0.1, "global_batch_size": 32}
    with det.core.init() as core_context:
        main(core_context, float(hparams["learning_rate"]), int(hparams["global_batch_size"]))
