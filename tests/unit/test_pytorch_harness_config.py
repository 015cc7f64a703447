"""`determined.exec.harness`: which class a `module:Class` entrypoint names, and the
`Trainer.fit` arguments a seed-era config gives (no training here)."""

import re
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from determined.common import expconf
from determined.exec.harness import HarnessError, constant_hparams, fit_arguments, load_trial_class, main
from determined.pytorch import Batch, Epoch, PyTorchTrial, Record

SEARCHER = {"name": "single", "metric": "validation_loss"}


def _config(**fields: Any) -> expconf.ExperimentConfig:
    return expconf.load_config({"entrypoint": "model_def:T", "searcher": SEARCHER, **fields})


def test_the_seed_era_fields_become_fit_arguments() -> None:
    config = _config(
        searcher={**SEARCHER, "max_length": {"epochs": 2}},
        records_per_epoch=1000,
        min_validation_period={"records": 640},
        min_checkpoint_period={"epochs": 1},
        scheduling_unit=10,
        checkpoint_policy="all",
        perform_initial_validation=True,
        profiling={"enabled": True},
    )

    assert fit_arguments(config, {"global_batch_size": 64}, on_cluster=True) == {
        "max_length": Batch(31),  # 2 * 1000 // 64, as Determined's master counted it
        "validation_period": Batch(10),
        "checkpoint_period": Batch(15),
        "reporting_period": Batch(10),
        "checkpoint_policy": "all",
        "step_zero_validation": True,
        "profiling_enabled": True,
    }


def test_the_defaults() -> None:
    arguments = fit_arguments(_config(searcher={**SEARCHER, "max_length": 50}), {}, on_cluster=True)

    assert arguments == {
        "max_length": Batch(50),
        "validation_period": None,  # {batches: 0}: no periodic validation
        "checkpoint_period": None,
        "reporting_period": Batch(100),
        "checkpoint_policy": "best",
        "step_zero_validation": False,
        "profiling_enabled": False,
    }


def test_units_the_trainer_counts_itself_stay_as_they_are() -> None:
    """No global_batch_size: records stay records; no records_per_epoch: epochs are the loader's."""
    config = _config(
        searcher={**SEARCHER, "max_length": {"records": 5000}}, min_validation_period={"epochs": 1}
    )

    arguments = fit_arguments(config, {}, on_cluster=True)

    assert (arguments["max_length"], arguments["validation_period"]) == (Record(5000), Epoch(1))


def test_a_period_shorter_than_a_batch_is_none() -> None:
    config = _config(searcher={**SEARCHER, "max_length": 8}, min_checkpoint_period={"records": 10})

    assert fit_arguments(config, {"global_batch_size": 32}, on_cluster=True)["checkpoint_period"] is None


def test_seed_era_asha_on_a_cluster_trains_by_the_searchers_operations() -> None:
    asha = {**SEARCHER, "name": "adaptive_asha", "max_trials": 4, "max_length": {"batches": 900}}

    assert fit_arguments(_config(searcher=asha), {}, on_cluster=True)["max_length"] is None
    assert fit_arguments(_config(searcher=asha), {}, on_cluster=False)["max_length"] == Batch(900)


def test_asha_time_in_a_training_unit_is_the_length() -> None:
    asha = {**SEARCHER, "name": "async_halving", "num_rungs": 3, "max_trials": 4}
    config = _config(searcher={**asha, "time_metric": "batches", "max_time": 300})

    assert fit_arguments(config, {}, on_cluster=True)["max_length"] == Batch(300)


def test_without_a_length_the_error_says_what_to_set() -> None:
    with pytest.raises(HarnessError, match="searcher.max_length"):
        fit_arguments(_config(), {}, on_cluster=True)


def test_off_a_cluster_hyperparameters_must_be_constants() -> None:
    config = _config(hyperparameters={"lr": 0.1, "net": {"width": 8}, "gbs": {"type": "const", "val": 4}})
    assert constant_hparams(config.hyperparameters) == {"lr": 0.1, "net": {"width": 8}, "gbs": 4}

    ranged = _config(hyperparameters={"net": {"width": {"type": "int", "minval": 1, "maxval": 9}}})
    with pytest.raises(HarnessError, match="net.width is a int range"):
        constant_hparams(ranged.hyperparameters)


MODEL_DEF = textwrap.dedent(
    """
    from determined import pytorch

    class MyTrial(pytorch.PyTorchTrial):
        pass

    class Outer:
        class Inner(pytorch.PyTorchTrial):
            pass

    class NotATrial:
        pass

    def function():
        pass
    """
)


@pytest.fixture
def context_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A context folder as the working directory, holding model_def.py and pkg/mod.py."""
    (tmp_path / "model_def.py").write_text(MODEL_DEF)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "mod.py").write_text(MODEL_DEF + "\nimport not_installed_anywhere\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    modules = ("model_def", "pkg", "pkg.mod")
    for name in modules:  # another test's model_def may be cached
        sys.modules.pop(name, None)
    yield tmp_path
    for name in modules:
        sys.modules.pop(name, None)


def test_the_class_is_imported_from_the_working_directory(context_dir: Path) -> None:
    trial_class = load_trial_class("model_def:MyTrial")

    assert issubclass(trial_class, PyTorchTrial) and trial_class.__name__ == "MyTrial"
    assert load_trial_class("model_def:Outer.Inner").__qualname__ == "Outer.Inner"


@pytest.mark.parametrize(
    ("entrypoint", "message"),
    [
        ("model_def:NotATrial", "names class model_def.NotATrial; determined-es runs Trial classes"),
        ("model_def:function", "names a function"),
        ("model_def:Outer", "names class model_def.Outer"),
        ("model_def:Outer.Missing", "model_def.Outer has no attribute 'Missing'"),
        ("model_def:Missing", "model_def has no attribute 'Missing'"),
        ("no_such_module:T", "there is no module 'no_such_module' in"),
        ("pkg.nothing:T", "there is no module 'pkg.nothing' in"),
        ("python3 train.py", "does not name a Trial class"),
    ],
)
def test_what_is_not_a_pytorch_trial_is_said_clearly(
    context_dir: Path, entrypoint: str, message: str
) -> None:
    with pytest.raises(HarnessError, match=re.escape(message)):
        load_trial_class(entrypoint)


def test_a_module_that_fails_to_import_shows_its_own_error(context_dir: Path) -> None:
    with pytest.raises(ModuleNotFoundError, match="not_installed_anywhere"):
        load_trial_class("pkg.mod:MyTrial")


def test_off_a_cluster_the_harness_needs_a_config(
    context_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("DET_MASTER", raising=False)
    assert main(["model_def:MyTrial"]) == 1
    assert "--config FILE model_def:MyTrial" in caplog.text
