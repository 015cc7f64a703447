"""Trains `model_def.MNistTrial` with Determined's PyTorch Trainer (the 0.38 way).

On a cluster (`entrypoint: python3 train.py --batches 200`) the hyperparameters, the trial
seed and the checkpoint to resume from come from the cluster; off-cluster
(`python3 train.py`) the hyperparameters and the `data` section are read from const.yaml
beside this file, and checkpoints go to the local user data folder. The same code runs on
several slots when started by `python3 -m determined.launch.torch_distributed`.

    python3 train.py [--batches N | --epochs N] [--validation-period N] [--reporting-period N]

Set OMP_NUM_THREADS=1 (e.g. `environment.environment_variables` in the config) for
bit-for-bit reproducible losses on CPU: torch then computes on one thread.
"""

import argparse
import logging
from pathlib import Path
from typing import Any

import yaml
from model_def import MNistTrial

import determined as det
from determined import pytorch

CONST_YAML = Path(__file__).resolve().parent / "const.yaml"


def main(max_length: pytorch.TrainUnit, validation_period: int | None, reporting_period: int) -> None:
    hparams: dict[str, Any] | None = None
    exp_conf: dict[str, Any] | None = None
    if det.get_cluster_info() is None:
        exp_conf = yaml.safe_load(CONST_YAML.read_text())
        hparams = exp_conf["hyperparameters"]
    with pytorch.init(hparams=hparams, exp_conf=exp_conf) as context:
        trainer = pytorch.Trainer(MNistTrial(context), context)
        trainer.fit(
            max_length=max_length,
            validation_period=pytorch.Batch(validation_period) if validation_period else None,
            reporting_period=pytorch.Batch(reporting_period),
        )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    length = parser.add_mutually_exclusive_group()
    length.add_argument("--batches", type=int, help="train this many batches (default 200)")
    length.add_argument("--epochs", type=int, help="train this many epochs")
    parser.add_argument(
        "--validation-period", type=int, help="validate every N batches (default: at the end)"
    )
    parser.add_argument(
        "--reporting-period", type=int, default=100, help="report training metrics every N batches"
    )
    return parser.parse_args()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    args = parse_args()
    max_length = pytorch.Epoch(args.epochs) if args.epochs else pytorch.Batch(args.batches or 200)
    main(max_length, args.validation_period, args.reporting_period)
