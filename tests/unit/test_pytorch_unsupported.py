"""The frameworks determined-es does not build: their modules import, and every public name
refuses to be used (called, constructed, subclassed) with an error naming itself and what to
use instead."""

import importlib
import subprocess
import sys

import pytest

MODULES = {
    "determined.pytorch.deepspeed": "det.pytorch.PyTorchTrial",
    "determined.pytorch.lightning": "det.pytorch.PyTorchTrial",
    "determined.pytorch.dsat": "searchers",
    "determined.pytorch.experimental": "Core API",
    "determined.keras": "det.pytorch.PyTorchTrial",
    "determined.tensorflow": "det.pytorch.PyTorchTrial",
    "determined.estimator": "det.pytorch.PyTorchTrial",
}


def public_names() -> list[tuple[str, str, str]]:
    return [
        (module, name, alternative)
        for module, alternative in MODULES.items()
        for name in importlib.import_module(module).__all__
    ]


@pytest.mark.parametrize(("module", "name", "alternative"), public_names())
def test_using_an_unsupported_name_says_so_and_what_to_use(module: str, name: str, alternative: str) -> None:
    stand_in = getattr(importlib.import_module(module), name)
    for use in (lambda: stand_in(), lambda: stand_in(1, key="value"), lambda: type("Mine", (stand_in,), {})):
        with pytest.raises(NotImplementedError) as raised:
            use()
        message = str(raised.value)
        assert message.startswith("determined-es does not support ")
        assert f"{module}.{name}" in message
        assert alternative in message


def test_the_well_known_names_exist() -> None:
    from determined.keras import TFKerasTrial
    from determined.pytorch.deepspeed import DeepSpeedTrial, DeepSpeedTrialContext
    from determined.pytorch.experimental import torch_batch_process

    with pytest.raises(
        NotImplementedError, match=r"DeepSpeed \(determined.pytorch.deepspeed.DeepSpeedTrial\)"
    ):

        class MyTrial(DeepSpeedTrial):  # a Determined user's trial fails where it is defined
            pass

    def annotated(context: DeepSpeedTrialContext) -> None:  # naming one in a hint is fine
        pass

    with pytest.raises(NotImplementedError, match="Keras"):
        TFKerasTrial()
    with pytest.raises(NotImplementedError, match="batch inference"):
        torch_batch_process(None)


def test_keras_tensorflow_and_estimator_load_neither_torch_nor_tensorflow() -> None:
    code = (
        "import sys, determined.keras, determined.tensorflow, determined.estimator; "
        "print(sorted(m for m in ('torch', 'tensorflow') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
