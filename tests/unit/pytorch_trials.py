"""Tiny PyTorchTrials for the Trainer's tests: a few dozen records of 4 features, a model
with dropout, an optimizer with state (SGD with momentum or Adam) and a per-batch LR
scheduler, so that resuming has everything to get right."""

from typing import Any, cast

import torch
import torch.nn.functional as F

import determined.pytorch as det_torch

RECORDS = 24
BATCH_SIZE = 4  # 6 batches per epoch


def dataset(seed: int, records: int = RECORDS) -> torch.utils.data.TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(records, 4, generator=generator)
    y = x.sum(dim=1, keepdim=True) + 0.1 * torch.randn(records, 1, generator=generator)
    return torch.utils.data.TensorDataset(x, y)


class TinyTrial(det_torch.PyTorchTrial):
    def __init__(self, context: det_torch.PyTorchTrialContext) -> None:
        self.context = context
        model = torch.nn.Sequential(
            torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Dropout(0.3), torch.nn.Linear(8, 1)
        )
        self.model = context.wrap_model(model)
        params = self.model.parameters()
        optimizer: torch.optim.Optimizer
        if context.get_hparams().get("optimizer", "sgd") == "adam":
            optimizer = torch.optim.Adam(params, lr=0.01)
        else:
            optimizer = torch.optim.SGD(params, lr=0.05, momentum=0.9)
        self.optimizer = context.wrap_optimizer(optimizer)
        self.scheduler = context.wrap_lr_scheduler(
            torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=2, gamma=0.9),
            det_torch.LRScheduler.StepMode.STEP_EVERY_BATCH,
        )
        self.losses: dict[int, float] = {}  # batch_idx -> loss (read by the tests)

    def build_training_data_loader(self) -> det_torch.DataLoader:
        return det_torch.DataLoader(dataset(0), batch_size=BATCH_SIZE, shuffle=True)

    def build_validation_data_loader(self) -> det_torch.DataLoader:
        return det_torch.DataLoader(dataset(1, records=8), batch_size=BATCH_SIZE)

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        x, y = batch
        loss = F.mse_loss(self.model(x), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.optimizer)
        self.losses[batch_idx] = loss.item()  # a sync per batch: fine in a test
        return {"loss": loss, "batch_idx": batch_idx}

    def evaluate_batch(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        x, y = batch
        return {"validation_loss": F.mse_loss(self.model(x), y)}

    def weights(self) -> list[torch.Tensor]:
        return [p.detach().clone() for p in cast(torch.nn.Module, self.model).parameters()]
