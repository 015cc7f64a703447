"""`load_trial_from_checkpoint_path`: a Trainer checkpoint gives back its trial, trained."""

import pathlib
import shutil
import sys
import textwrap

import pytest
import torch
from pytorch_trials import TinyTrial

import determined.pytorch as det_torch

MODEL_DEF = textwrap.dedent(
    """
    from pytorch_trials import TinyTrial


    class Outer:
        class NestedTrial(TinyTrial):
            def __init__(self, context, scale=1):
                super().__init__(context)
                self.scale = scale
    """
)


# Exact comparisons of losses need one thread (conftest.py).
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def train(trial_class: type[TinyTrial], storage: pathlib.Path) -> tuple[TinyTrial, pathlib.Path]:
    with det_torch.init(
        hparams={"optimizer": "adam"}, exp_conf={"checkpoint_storage": str(storage)}
    ) as context:
        trial = trial_class(context)
        det_torch.Trainer(trial, context).fit(max_length=det_torch.Batch(5), checkpoint_policy="none")
    [checkpoint] = [p for p in storage.iterdir() if p.name != "tensorboard"]
    return trial, checkpoint


def test_the_loaded_trial_has_the_trained_weights(tmp_path: pathlib.Path) -> None:
    trained, checkpoint = train(TinyTrial, tmp_path)
    loaded = det_torch.load_trial_from_checkpoint_path(str(checkpoint))
    assert isinstance(loaded, TinyTrial)
    assert isinstance(loaded.context, det_torch.CheckpointLoadContext)
    assert loaded.context.get_hparams() == {"optimizer": "adam"}
    for got, want in zip(loaded.weights(), trained.weights(), strict=True):
        assert torch.equal(got, want)
    fresh = TinyTrial(loaded.context)  # another trial of the same context: untrained weights
    assert not all(torch.equal(a, b) for a, b in zip(fresh.weights(), trained.weights(), strict=True))


def test_the_class_is_imported_from_the_checkpoints_code(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "nested_model_def.py").write_text(MODEL_DEF)
    monkeypatch.syspath_prepend(str(source))
    import nested_model_def  # type: ignore[import-not-found]

    trained, checkpoint = train(nested_model_def.Outer.NestedTrial, tmp_path / "checkpoints")
    # Gone from where it was trained: only the checkpoint's copy is left.
    shutil.rmtree(source)
    monkeypatch.delitem(sys.modules, "nested_model_def")
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(source)])

    loaded = det_torch.load_trial_from_checkpoint_path(checkpoint, trial_kwargs={"scale": 3})
    assert type(loaded).__qualname__ == "Outer.NestedTrial"
    assert sys.modules["nested_model_def"].__file__ == str(checkpoint / "code" / "nested_model_def.py")
    assert loaded.scale == 3  # type: ignore[attr-defined]
    for got, want in zip(loaded.weights(), trained.weights(), strict=True):  # type: ignore[attr-defined]
        assert torch.equal(got, want)


def test_an_explicit_trial_class(tmp_path: pathlib.Path) -> None:
    class Other(TinyTrial):
        pass

    trained, checkpoint = train(TinyTrial, tmp_path)
    loaded = det_torch.load_trial_from_checkpoint_path(checkpoint, trial_class=Other)
    assert type(loaded) is Other
    for got, want in zip(loaded.weights(), trained.weights(), strict=True):  # type: ignore[attr-defined]
        assert torch.equal(got, want)


def test_a_folder_that_is_not_a_trainer_checkpoint(tmp_path: pathlib.Path) -> None:
    with pytest.raises(FileNotFoundError, match="has no load_data.json"):
        det_torch.load_trial_from_checkpoint_path(tmp_path)
