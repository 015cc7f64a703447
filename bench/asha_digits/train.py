"""One trial of the digits search, written as a Determined user writes it with the Core API.

Trains the MLP of digits.py one epoch at a time up to the searcher's max_time (20 epochs),
validating after each epoch (`accuracy`, and the time metric `epochs` ASHA needs). When the
cluster asks it to stop (ASHA cut it at a rung, or the experiment was paused) it checkpoints and
exits; a resumed run starts from the latest checkpoint.
"""

import torch
from digits import Trainer, load_data

import determined as det

torch.set_num_threads(1)  # two trials share the two cores, as in the peers' benchmark

info = det.get_cluster_info()
hparams = info.trial.hparams if info else {"lr": 1e-2, "hidden": 64}
MAX_EPOCHS = 20  # the searcher's max_time

trainer = Trainer(load_data(), int(hparams["hidden"]), float(hparams["lr"]))
epoch = 0

with det.core.init() as core_context:
    if info and info.latest_checkpoint:
        with core_context.checkpoint.restore_path(info.latest_checkpoint) as path:
            state = torch.load(path / "state.pt")
        trainer.model.load_state_dict(state["model"])
        trainer.opt.load_state_dict(state["opt"])
        trainer.gen.set_state(state["gen"])
        trainer.batches, epoch = state["batches"], state["epoch"]
        print(f"resumed at epoch {epoch}", flush=True)

    def checkpoint() -> None:
        state = {
            "model": trainer.model.state_dict(),
            "opt": trainer.opt.state_dict(),
            "gen": trainer.gen.get_state(),
            "batches": trainer.batches,
            "epoch": epoch,
        }
        with core_context.checkpoint.store_path({"steps_completed": trainer.batches}) as (path, _):
            torch.save(state, path / "state.pt")

    while epoch < MAX_EPOCHS:
        trainer.train_epoch()
        epoch += 1
        core_context.train.report_training_metrics(steps_completed=trainer.batches, metrics={"epochs": epoch})
        core_context.train.report_validation_metrics(
            steps_completed=trainer.batches, metrics={"accuracy": trainer.val_acc(), "epochs": epoch}
        )
        if core_context.preempt.should_preempt():
            checkpoint()
            print(f"stopping at epoch {epoch}", flush=True)
            break
    else:
        checkpoint()
