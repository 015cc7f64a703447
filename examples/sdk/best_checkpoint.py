"""The Python SDK from a script: train the MNIST example (`../mnist_pytorch`) on a cluster,
take the experiment's best checkpoint, download it, load the trained trial back with
`det.pytorch.load_trial_from_checkpoint_path` and use its model on the test split.

    python3 best_checkpoint.py [--master HOST:PORT] [--user NAME] [--password PASS]
                               [--batches 200] [--output checkpoints]

The master defaults to DET_MASTER (else localhost:8080). Prints the experiment's id, the
best checkpoint's uuid and validation loss, where it was downloaded, and the loaded model's
accuracy on the (offline, generated) MNIST test split.
"""

import argparse
import importlib
import pathlib
import tempfile
from typing import Any

import torch
import yaml

from determined import pytorch
from determined.experimental import client

MNIST_EXAMPLE = pathlib.Path(__file__).resolve().parents[1] / "mnist_pytorch"


def experiment_config(batches: int) -> dict[str, Any]:
    """The example's const.yaml, trained for `batches` batches and validated halfway and at the end."""
    config: dict[str, Any] = yaml.safe_load((MNIST_EXAMPLE / "const.yaml").read_text())
    config["entrypoint"] = f"python3 train.py --batches {batches} --validation-period {max(1, batches // 2)}"
    return config


def test_accuracy(trial: pytorch.PyTorchTrial, data_config: dict[str, Any] | None) -> float:
    """The share of the test split the trial's model classifies right."""
    # The checkpoint's copy of the code is importable once the trial is loaded: its data.py
    # writes the MNIST-format files (offline) and reads them back.
    data: Any = importlib.import_module("data")
    model: torch.nn.Module = vars(trial)["model"]  # MNistTrial keeps its wrapped model there
    model.eval()
    with tempfile.TemporaryDirectory() as folder:
        loader = torch.utils.data.DataLoader(data.get_dataset(folder, False, data_config), batch_size=256)
        right = total = 0
        with torch.no_grad():
            for images, labels in loader:
                right += int((model(images).argmax(dim=1) == labels).sum())
                total += len(labels)
    return right / total


def main(args: argparse.Namespace) -> None:
    client.login(master=args.master, user=args.user, password=args.password)
    config = experiment_config(args.batches)
    experiment = client.create_experiment(config=config, model_dir=str(MNIST_EXAMPLE))
    print(f"Created experiment {experiment.id}", flush=True)
    state = experiment.wait(interval=1.0)
    if state != client.ExperimentState.COMPLETED:
        raise SystemExit(f"experiment {experiment.id} ended {state}")

    checkpoint = experiment.top_checkpoint()
    training = checkpoint.training
    print(
        f"Best checkpoint {checkpoint.uuid}: trial {training.trial_id} after {training.steps_completed}"
        f" batches, validation_loss {training.validation_metrics.get('validation_loss')}"
    )
    path = checkpoint.download(str(pathlib.Path(args.output) / checkpoint.uuid))
    print(f"Downloaded to {path}")

    trial = pytorch.load_trial_from_checkpoint_path(path)
    print(f"Loaded {type(trial).__name__}: test accuracy {test_accuracy(trial, config.get('data')):.3f}")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--master", help="HOST:PORT of the master (default: DET_MASTER or localhost:8080)")
    parser.add_argument("--user", help="log in as this user (default: the CLI's)")
    parser.add_argument("--password", help="the user's password")
    parser.add_argument("--batches", type=int, default=200, help="how long the trial trains (default 200)")
    parser.add_argument(
        "--output", default="checkpoints", help="where the checkpoint goes (default checkpoints/)"
    )
    return parser.parse_args()


if __name__ == "__main__":
    main(parse_args())
