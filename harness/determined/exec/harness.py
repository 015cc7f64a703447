"""`python3 -m determined.exec.harness [--test-mode] [--config FILE] module:Class`

Runs a legacy Trial class: a `det.pytorch.PyTorchTrial` subclass named by a seed-era
`entrypoint: model_def:MyTrial` (or `pkg.mod:Outer.Inner`). On a cluster each worker runs
this under the torch launcher (`--trial module:Class`, §5 of DETERMINED-COMPAT); it imports
the class from the working directory (the context directory) and trains it with the
Trainer, taking what Determined's seed-era configs say about training from the experiment
config (§6.2): `searcher.max_length`, `min_validation_period`, `min_checkpoint_period`,
`scheduling_unit`, `records_per_epoch`, `checkpoint_policy`, `perform_initial_validation`,
`optimizations.aggregation_frequency` and `profiling.enabled`.

Off a cluster (`det experiment create --local --test-mode` runs it so) `--config` names the
experiment config to read instead; its hyperparameters must then be constants.
"""

import argparse
import importlib
import inspect
import logging
import os
import sys
from collections.abc import Mapping
from typing import Any

import determined as det
from determined import pytorch
from determined.common import expconf
from determined.common.entrypoint import is_legacy_trial
from determined.common.expconf._lengths import to_nearest_batches
from determined.common.expconf._searcher import ASHA_SEARCHERS

logger = logging.getLogger("determined.exec.harness")

PROG = "python3 -m determined.exec.harness"
LENGTH_UNITS = ("batches", "records", "epochs")


class HarnessError(Exception):
    """Something about the entrypoint or the config that stops the trial before it trains."""


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[1])
    parser.add_argument("entrypoint", help="the Trial class, as module:Class")
    parser.add_argument(
        "--test-mode", action="store_true", help="train and validate one batch, checkpoint once"
    )
    parser.add_argument("--config", help="off a cluster: the experiment config (YAML or JSON) to read")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    try:
        run(args.entrypoint, config_file=args.config, test_mode=args.test_mode)
    except HarnessError as error:
        logger.error("%s", error)
        return 1
    return 0


def run(entrypoint: str, *, config_file: str | None, test_mode: bool) -> None:
    """Train the Trial class `entrypoint` as the cluster (or, off it, `config_file`) says."""
    info = det.get_cluster_info()
    if info is not None:
        if info.task_type != "TRIAL":
            raise HarnessError(f"a Trial class runs as a trial, not in a {info.task_type} task")
        if config_file is not None:
            raise HarnessError("--config is for runs off a cluster: a trial uses its experiment's config")
        raw_config, hparams = info.trial._config, info.trial.hparams
    elif config_file is None:
        raise HarnessError(
            f"off a cluster, name the experiment config to use: {PROG} --config FILE {entrypoint}"
        )
    else:
        raw_config, hparams = _read_config(config_file)
    config = _parsed(raw_config)
    if config.debug:
        logging.getLogger().setLevel(logging.DEBUG)
    trial_class = load_trial_class(entrypoint)
    arguments = fit_arguments(config, hparams, on_cluster=info is not None)
    with pytorch.init(
        hparams=hparams,
        exp_conf=raw_config,
        aggregation_frequency=config.optimizations.aggregation_frequency,
    ) as context:
        if context.distributed.rank != 0 and not config.debug:
            logging.getLogger().setLevel(logging.WARNING)  # one worker's story is enough
        logger.info("training %s.%s with the Trainer", trial_class.__module__, trial_class.__qualname__)
        trainer = pytorch.Trainer(trial_class(context), context)
        trainer.fit(
            **arguments,
            latest_checkpoint=info.latest_checkpoint if info is not None else None,
            test_mode=test_mode,
        )


def load_trial_class(entrypoint: str) -> type[pytorch.PyTorchTrial]:
    """The class `module:Qualified.Name` names, imported from the working directory (the
    context directory on a cluster); it must be a PyTorchTrial."""
    entrypoint = entrypoint.strip()
    if not is_legacy_trial(entrypoint):
        raise HarnessError(
            f"{entrypoint!r} does not name a Trial class: give module:Class, e.g. model_def:MyTrial"
        )
    module_name, _, qualname = entrypoint.partition(":")
    folder = os.getcwd()
    if folder not in sys.path:
        sys.path.insert(0, folder)
    try:
        found: object = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name is None or not (module_name + ".").startswith(error.name + "."):
            raise  # the module exists but imports something missing: its own traceback says what
        raise HarnessError(
            f"entrypoint {entrypoint!r}: there is no module {error.name!r} in {folder}"
        ) from None
    for depth, name in enumerate(qualname.split(".")):
        if not hasattr(found, name):
            where = ".".join([module_name, *qualname.split(".")[:depth]])
            raise HarnessError(f"entrypoint {entrypoint!r}: {where} has no attribute {name!r}")
        found = getattr(found, name)
    if not (isinstance(found, type) and issubclass(found, pytorch.PyTorchTrial)):
        raise HarnessError(
            f"entrypoint {entrypoint!r} names {_described(found)}; determined-es runs Trial classes that "
            "subclass det.pytorch.PyTorchTrial (DeepSpeedTrial, TFKerasTrial and EstimatorTrial are not "
            "supported): port it to PyTorchTrial, or train from a script with the Core API"
        )
    return found


def fit_arguments(
    config: expconf.ExperimentConfig, hparams: Mapping[str, Any], *, on_cluster: bool
) -> dict[str, Any]:
    """`Trainer.fit`'s arguments from a seed-era config (all but `latest_checkpoint` and
    `test_mode`). Lengths in records, and in epochs when `records_per_epoch` is set, become
    batches through the `global_batch_size` hyperparameter as Determined counted them; a
    period of 0 means none. `max_length` is `searcher.max_length`, except for seed-era ASHA
    on a cluster: None, so that the Trainer trains rung by rung as the searcher's
    operations say."""
    gbs = hparams.get("global_batch_size")
    counts = _Counts(int(gbs) if gbs is not None else None, config.records_per_epoch)
    return {
        "max_length": _max_length(config.searcher, counts, on_cluster=on_cluster),
        "validation_period": counts.period(config.min_validation_period),
        "checkpoint_period": counts.period(config.min_checkpoint_period),
        "reporting_period": pytorch.Batch(config.scheduling_unit),
        "checkpoint_policy": config.checkpoint_policy,
        "step_zero_validation": config.perform_initial_validation,
        "profiling_enabled": config.profiling.enabled,
    }


class _Counts:
    """Config lengths as the Trainer's units, for one trial's batch and epoch sizes."""

    def __init__(self, global_batch_size: int | None, records_per_epoch: int) -> None:
        self.global_batch_size = global_batch_size
        self.records_per_epoch = records_per_epoch

    def unit(self, length: expconf.Length | int) -> pytorch.TrainUnit:
        counted = to_nearest_batches(
            length, global_batch_size=self.global_batch_size, records_per_epoch=self.records_per_epoch
        )
        return pytorch.TrainUnit._from_values(**counted.to_json())

    def period(self, length: expconf.Length) -> pytorch.TrainUnit | None:
        found = self.unit(length)
        return found if found.value else None


def _max_length(
    searcher: expconf.SearcherConfig, counts: _Counts, *, on_cluster: bool
) -> pytorch.TrainUnit | None:
    if searcher.max_length is not None:
        if on_cluster and searcher.name in ASHA_SEARCHERS:
            return None
        return counts.unit(searcher.max_length)
    if searcher.time_metric in LENGTH_UNITS and searcher.max_time is not None:
        # As the searcher counts it, so that the Trainer finds max_length and max_time agree.
        return pytorch.TrainUnit._from_values(**{searcher.time_metric: searcher.max_time})
    raise HarnessError(
        "a Trial class trains for searcher.max_length, which the config does not set: add it "
        "(e.g. searcher.max_length: {batches: 1000}), or train from a script with "
        "det.pytorch.Trainer(...).fit(max_length=...)"
    )


def _described(found: object) -> str:
    if isinstance(found, type):
        bases = [base.__name__ for base in found.__mro__[1:] if base is not object]
        kind = f" (a subclass of {', '.join(bases)})" if bases else ""
        return f"class {found.__module__}.{found.__qualname__}{kind}"
    if inspect.ismodule(found):
        return f"module {found.__name__}"
    return f"a {type(found).__name__}"


def _read_config(path: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """An off-cluster run's config and hyperparameter values (its constants)."""
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read()
    except OSError as error:
        raise HarnessError(f"cannot read the experiment config: {error}") from None
    config = _parsed(text)
    return config.to_json_dict(), constant_hparams(config.hyperparameters)


def constant_hparams(hyperparameters: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """The values of hyperparameters that are all constants (nested groups give dicts)."""
    values: dict[str, Any] = {}
    for name, hp in hyperparameters.items():
        if isinstance(hp, expconf.HyperparameterGroup):
            values[name] = constant_hparams(hp.vals, f"{prefix}{name}.")
        elif isinstance(hp, expconf.ConstHyperparameter):
            values[name] = hp.val
        else:
            raise HarnessError(
                f"hyperparameter {prefix}{name} is a {hp.type} range: off a cluster each hyperparameter "
                "needs one value (det experiment create --local --test-mode picks one for you)"
            )
    return values


def _parsed(raw: str | Mapping[str, Any]) -> expconf.ExperimentConfig:
    try:
        return expconf.load_config(raw, new_experiment=False)
    except expconf.InvalidConfigError as error:
        raise HarnessError(f"the experiment config is not valid:\n{error}") from None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
