"""The quickstart's MNIST model as a Determined `PyTorchTrial`.

The constructor wraps the model and the optimizer with the trial context (which moves them
to the trial's device and, with several slots, wraps the model in DistributedDataParallel);
`train_batch` and `evaluate_batch` are the forward passes of training and validation. The
same class runs under the Trainer (`train.py`, Determined 0.38) and as a seed-era
entrypoint (`entrypoint: model_def:MNistTrial`, see legacy.yaml).
"""

from typing import Any, cast

import data
import torch
from torch import nn

from determined import pytorch

# Where the data set is looked for (and written when missing), relative to the working
# folder: on a cluster the trial's copy of the context directory.
DATA_DIR = "data"


def build_model(n_filters1: int, n_filters2: int, dropout1: float, dropout2: float) -> nn.Module:
    """Two 3x3 convolutions, max pooling and two dense layers; log-probabilities out."""
    return nn.Sequential(
        nn.Conv2d(1, n_filters1, kernel_size=3),
        nn.ReLU(),
        nn.Conv2d(n_filters1, n_filters2, kernel_size=3),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Dropout2d(dropout1),
        nn.Flatten(),
        # 28x28 input: 26x26 and 24x24 after the convolutions, 12x12 after pooling.
        nn.Linear(12 * 12 * n_filters2, 128),
        nn.ReLU(),
        nn.Dropout(dropout2),
        nn.Linear(128, 10),
        nn.LogSoftmax(dim=1),
    )


class MNistTrial(pytorch.PyTorchTrial):
    def __init__(self, context: pytorch.PyTorchTrialContext) -> None:
        self.context = context
        self.model = context.wrap_model(
            build_model(
                n_filters1=int(context.get_hparam("n_filters1")),
                n_filters2=int(context.get_hparam("n_filters2")),
                dropout1=float(context.get_hparam("dropout1")),
                dropout2=float(context.get_hparam("dropout2")),
            )
        )
        self.optimizer = context.wrap_optimizer(
            torch.optim.Adadelta(self.model.parameters(), lr=float(context.get_hparam("learning_rate")))
        )
        self.loss_fn = nn.NLLLoss()

    def build_training_data_loader(self) -> pytorch.DataLoader:
        train_data = data.get_dataset(DATA_DIR, train=True, data_config=self.context.get_data_config())
        return pytorch.DataLoader(train_data, batch_size=self.context.get_per_slot_batch_size(), shuffle=True)

    def build_validation_data_loader(self) -> pytorch.DataLoader:
        validation_data = data.get_dataset(DATA_DIR, train=False, data_config=self.context.get_data_config())
        return pytorch.DataLoader(validation_data, batch_size=self.context.get_per_slot_batch_size())

    def train_batch(
        self, batch: pytorch.TorchData, epoch_idx: int, batch_idx: int
    ) -> dict[str, torch.Tensor]:
        images, labels = cast(tuple[torch.Tensor, torch.Tensor], batch)
        loss = self.loss_fn(self.model(images), labels)
        self.context.backward(loss)
        self.context.step_optimizer(self.optimizer)
        return {"loss": loss}

    def evaluate_batch(self, batch: pytorch.TorchData, batch_idx: int) -> dict[str, Any]:
        images, labels = cast(tuple[torch.Tensor, torch.Tensor], batch)
        output = self.model(images)
        predicted = output.argmax(dim=1)
        return {
            "validation_loss": self.loss_fn(output, labels).item(),
            "accuracy": (predicted == labels).float().mean().item(),
        }
