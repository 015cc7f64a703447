"""`PyTorchTrialContext` on one process off-cluster: settings, wrapping, gradient aggregation,
clipping, LR scheduler step modes, gradient scaling, and the experimental switches."""

import copy
import logging
import pathlib
from collections.abc import Callable
from typing import Any

import pytest
import torch

import determined as det
from determined.core import DummyTrainContext
from determined.pytorch import LRScheduler, PyTorchTrialContext

torch.set_num_threads(1)

MakeContext = Callable[..., PyTorchTrialContext]


@pytest.fixture
def make_context(tmp_path: pathlib.Path) -> MakeContext:
    def make(**overrides: Any) -> PyTorchTrialContext:
        core_context = det.core.init(checkpoint_storage=str(tmp_path))
        core_context.train = DummyTrainContext(tmp_path / "tensorboard")
        settings: dict[str, Any] = {
            "trial_seed": 7,
            "hparams": {"global_batch_size": 32, "lr": 0.1},
            "slots_per_trial": 1,
            "num_gpus": 0,
            "exp_conf": {"data": {"url": "file:///data"}, "searcher": {"metric": "loss"}},
            "aggregation_frequency": 1,
            "steps_completed": 0,
            "managed_training": True,
            "debug_enabled": False,
        }
        return PyTorchTrialContext(core_context, **{**settings, **overrides})

    return make


# -- settings ----------------------------------------------------------------------------------


def test_hyperparameters_and_config(make_context: MakeContext) -> None:
    context = make_context()
    assert context.get_hparam("lr") == 0.1
    assert context.get_hparams() == {"global_batch_size": 32, "lr": 0.1}
    assert context.get_data_config() == {"url": "file:///data"}
    assert context.get_experiment_config()["searcher"] == {"metric": "loss"}
    assert context.get_trial_seed() == 7
    assert context.distributed.size == 1
    assert context.device == torch.device("cpu")


def test_a_missing_hyperparameter_names_the_ones_there_are(make_context: MakeContext) -> None:
    context = make_context()
    with pytest.raises(KeyError, match=r"no hyperparameter 'momentum'.* are: 'global_batch_size', 'lr'"):
        context.get_hparam("momentum")
    with pytest.raises(ValueError, match="momentum"):  # what Determined raises, still caught
        context.get_hparam("momentum")
    bare = make_context(hparams=None, exp_conf=None)
    with pytest.raises(KeyError, match="none"):
        bare.get_hparam("lr")
    with pytest.raises(ValueError, match=r"pass hparams=\.\.\. to det.pytorch.init"):
        bare.get_hparams()
    with pytest.raises(ValueError, match=r"pass exp_conf=\.\.\. to det.pytorch.init"):
        bare.get_experiment_config()


def test_batch_sizes(make_context: MakeContext, caplog: pytest.LogCaptureFixture) -> None:
    context = make_context(slots_per_trial=4)
    assert (context.get_global_batch_size(), context.get_per_slot_batch_size()) == (32, 8)
    with caplog.at_level(logging.WARNING, "determined.pytorch"):
        uneven = make_context(hparams={"global_batch_size": 30}, slots_per_trial=4)
        assert (uneven.get_global_batch_size(), uneven.get_per_slot_batch_size()) == (28, 7)
    assert "does not divide over 4 slots" in caplog.text
    with pytest.raises(ValueError, match="hyperparameter global_batch_size"):
        make_context(hparams={"lr": 1}).get_global_batch_size()
    with pytest.raises(ValueError, match="at least the number of slots"):
        make_context(hparams={"global_batch_size": 2}, slots_per_trial=4).get_per_slot_batch_size()


def test_ids_exist_only_on_a_cluster(make_context: MakeContext) -> None:
    with pytest.raises(RuntimeError, match="on a cluster"):
        make_context().get_experiment_id()
    with pytest.raises(RuntimeError, match="on a cluster"):
        make_context().get_trial_id()


def test_stop_requested(make_context: MakeContext) -> None:
    context = make_context()
    assert not context.get_stop_requested()
    context.set_stop_requested(True)
    assert context.get_stop_requested()
    with pytest.raises(TypeError, match="bool"):
        context.set_stop_requested(1)  # type: ignore[arg-type]


def test_where_training_is(make_context: MakeContext) -> None:
    context = make_context()
    for ask in (context.current_train_batch, context.is_epoch_start, context.is_epoch_end):
        with pytest.raises(RuntimeError, match="training has not started"):
            ask()
    context._epoch_len = 3
    context._current_batch_idx = 3
    assert (context.current_train_batch(), context.current_train_epoch()) == (3, 1)
    assert context.is_epoch_start() and not context.is_epoch_end()
    context._current_batch_idx = 5
    assert not context.is_epoch_start() and context.is_epoch_end()


def test_tensorboard_writer_is_made_once_on_the_trials_folder(make_context: MakeContext) -> None:
    context = make_context(enable_tensorboard_logging=False)
    assert not context.get_enable_tensorboard_logging()
    assert context._tensorboard_writer is None
    writer = context.get_tensorboard_writer()
    assert context.get_tensorboard_writer() is writer
    writer.add_scalar("loss", 1.0, 0)
    writer.close()
    assert [p.name.startswith("events.out.tfevents") for p in context.get_tensorboard_path().iterdir()] == [
        True
    ]


# -- wrapping ----------------------------------------------------------------------------------


def test_wrapping_registers_for_the_trainer(make_context: MakeContext) -> None:
    context = make_context()
    model = context.wrap_model(torch.nn.Linear(2, 1))
    assert isinstance(model, torch.nn.Linear)  # one process: no DistributedDataParallel
    optimizer = context.wrap_optimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
    assert context.wrap_lr_scheduler(scheduler, LRScheduler.StepMode.STEP_EVERY_EPOCH, 2) is scheduler
    assert context.models == [model] and context.optimizers == [optimizer]
    (wrapped,) = context.lr_schedulers
    assert (wrapped._scheduler, wrapped._step_mode, wrapped._frequency) == (
        scheduler, LRScheduler.StepMode.STEP_EVERY_EPOCH, 2,
    )  # fmt: skip
    assert context.to_device({"x": [torch.ones(1)]})["x"][0].device == torch.device("cpu")


def test_lr_scheduler_mistakes(make_context: MakeContext) -> None:
    context = make_context()
    model = context.wrap_model(torch.nn.Linear(2, 1))
    unwrapped = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="returned by context.wrap_optimizer"):
        context.wrap_lr_scheduler(
            torch.optim.lr_scheduler.StepLR(unwrapped, 1), LRScheduler.StepMode.STEP_EVERY_BATCH
        )
    optimizer = context.wrap_optimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)
    with pytest.raises(ValueError, match="MANUAL_STEP"):
        context.wrap_lr_scheduler(plateau, LRScheduler.StepMode.STEP_EVERY_EPOCH)
    context.wrap_lr_scheduler(plateau, LRScheduler.StepMode.MANUAL_STEP)
    with pytest.raises(TypeError, match="StepMode"):
        LRScheduler(plateau, "every batch")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="frequency"):
        LRScheduler(plateau, LRScheduler.StepMode.MANUAL_STEP, frequency=0)


def test_lr_scheduler_wrapper_passes_through() -> None:
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    wrapped = LRScheduler(
        torch.optim.lr_scheduler.StepLR(optimizer, 1, gamma=0.5), LRScheduler.StepMode.MANUAL_STEP
    )
    optimizer.step()
    wrapped.step()
    assert wrapped.get_last_lr() == [0.5]
    state = wrapped.state_dict()
    fresh = LRScheduler(
        torch.optim.lr_scheduler.StepLR(torch.optim.SGD(model.parameters(), lr=1.0), 1, gamma=0.5),
        LRScheduler.StepMode.MANUAL_STEP,
    )
    fresh.load_state_dict(state)
    assert fresh.state_dict()["last_epoch"] == 1


# -- training steps ----------------------------------------------------------------------------


def data(batches: int, size: int = 4) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    return [
        (torch.randn(size, 3, generator=generator), torch.randn(size, 1, generator=generator))
        for _ in range(batches)
    ]


def linear() -> torch.nn.Linear:
    torch.manual_seed(0)
    return torch.nn.Linear(3, 1)


def train(context: PyTorchTrialContext, batches: list[Any], **step: Any) -> torch.nn.Module:
    """The usual train_batch, driven the way the Trainer drives it."""
    model = context.wrap_model(linear())
    optimizer = context.wrap_optimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    for batch_idx, (x, y) in enumerate(batches):
        context._current_batch_idx = batch_idx
        context.backward(torch.nn.functional.mse_loss(model(x), y))
        context.step_optimizer(optimizer, **step)
    return model


def test_aggregating_two_batches_is_one_step_on_both(make_context: MakeContext) -> None:
    batches = data(4)
    aggregated = train(make_context(aggregation_frequency=2), batches)
    doubled = [
        (torch.cat([a[0], b[0]]), torch.cat([a[1], b[1]]))
        for a, b in zip(batches[::2], batches[1::2], strict=True)
    ]
    plain = train(make_context(), doubled)
    for got, want in zip(aggregated.parameters(), plain.parameters(), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7)


def test_the_optimizer_waits_for_the_end_of_an_aggregation(make_context: MakeContext) -> None:
    context = make_context(aggregation_frequency=2)
    model = context.wrap_model(linear())
    before = copy.deepcopy(model.state_dict())
    optimizer = context.wrap_optimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    ((x, y),) = data(1)
    context._current_batch_idx = 0
    assert not context._should_communicate_and_update()
    context.backward(torch.nn.functional.mse_loss(model(x), y))
    context.step_optimizer(optimizer)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert model.weight.grad is not None
    with pytest.raises(
        ValueError, match=r"auto_zero_grads=False\) cannot be used with aggregation_frequency > 1"
    ):
        context.step_optimizer(optimizer, auto_zero_grads=False)


def test_summed_aggregation_when_asked(make_context: MakeContext) -> None:
    context = make_context(aggregation_frequency=2)
    model = context.wrap_model(torch.nn.Linear(1, 1, bias=False))
    optimizer = context.wrap_optimizer(
        torch.optim.SGD(model.parameters(), lr=1.0), average_aggregated_gradients=False
    )
    with torch.no_grad():
        model.weight.fill_(0.0)
    for batch_idx in range(2):
        context._current_batch_idx = batch_idx
        context.backward(model(torch.ones(1, 1)).sum())  # gradient 1 per batch
        context.step_optimizer(optimizer)
    assert model.weight.item() == -2.0


def test_clip_grads_gets_the_parameters_before_the_step(make_context: MakeContext) -> None:
    batches = data(3)
    clipped = train(
        make_context(), batches, clip_grads=lambda params: torch.nn.utils.clip_grad_norm_(params, 0.01)
    )
    model = linear()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in batches:
        torch.nn.functional.mse_loss(model(x), y).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01)
        optimizer.step()
        optimizer.zero_grad()
    for got, want in zip(clipped.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(got, want)


def test_auto_zero_grads(make_context: MakeContext) -> None:
    context = make_context()
    model = context.wrap_model(linear())
    optimizer = context.wrap_optimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    ((x, y),) = data(1)
    context._current_batch_idx = 0
    context.backward(torch.nn.functional.mse_loss(model(x), y))
    context.step_optimizer(optimizer, auto_zero_grads=False)
    assert model.weight.grad is not None and model.weight.grad.abs().sum() > 0
    context.step_optimizer(optimizer)
    assert model.weight.grad is None or model.weight.grad.abs().sum() == 0


@pytest.mark.parametrize(
    ("aggregation_frequency", "frequency", "steps"), [(1, 1, 4), (2, 1, 2), (1, 2, 2), (2, 2, 1)]
)
def test_schedulers_that_step_with_the_optimizer(
    make_context: MakeContext, aggregation_frequency: int, frequency: int, steps: int
) -> None:
    context = make_context(aggregation_frequency=aggregation_frequency)
    model = context.wrap_model(linear())
    optimizer = context.wrap_optimizer(torch.optim.SGD(model.parameters(), lr=1.0))
    every_step = torch.optim.lr_scheduler.StepLR(optimizer, 1, gamma=0.5)
    context.wrap_lr_scheduler(every_step, LRScheduler.StepMode.STEP_EVERY_OPTIMIZER_STEP, frequency)
    other = context.wrap_optimizer(torch.optim.SGD(model.parameters(), lr=1.0))
    manual = torch.optim.lr_scheduler.StepLR(other, 1, gamma=0.5)
    context.wrap_lr_scheduler(manual, LRScheduler.StepMode.MANUAL_STEP)
    for batch_idx, (x, y) in enumerate(data(4)):
        context._current_batch_idx = batch_idx
        context.backward(torch.nn.functional.mse_loss(model(x), y))
        context.step_optimizer(optimizer)
    assert every_step.last_epoch == steps
    assert manual.last_epoch == 0  # only its owner steps a MANUAL_STEP scheduler


def test_gradient_scaling_on_the_cpu_matches_plain_torch(make_context: MakeContext) -> None:
    if not hasattr(torch.amp, "GradScaler"):
        pytest.skip("this torch has no device-generic torch.amp.GradScaler")
    batches = data(3)
    norms: list[float] = []

    def clip(params: list[torch.nn.Parameter]) -> None:
        norms.append(float(torch.nn.utils.clip_grad_norm_(params, 0.5)))

    context = make_context()
    model = context.wrap_model(linear())
    optimizer = context.wrap_optimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    scaler = context.wrap_scaler(torch.amp.GradScaler("cpu", init_scale=1024.0))
    assert context._scalers == [scaler]
    with pytest.raises(ValueError, match="already wrapped"):
        context.wrap_scaler(scaler)
    for batch_idx, (x, y) in enumerate(batches):
        context._current_batch_idx = batch_idx
        context.backward(scaler.scale(torch.nn.functional.mse_loss(model(x), y)))
        context.step_optimizer(optimizer, clip_grads=clip, scaler=scaler)
        scaler.update()

    reference = linear()
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    reference_scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    reference_norms = []
    for x, y in batches:
        reference_scaler.scale(torch.nn.functional.mse_loss(reference(x), y)).backward()
        reference_scaler.unscale_(reference_optimizer)
        reference_norms.append(float(torch.nn.utils.clip_grad_norm_(reference.parameters(), 0.5)))
        reference_scaler.step(reference_optimizer)
        reference_scaler.update()
        reference_optimizer.zero_grad()
    assert norms == reference_norms and max(norms) < 100  # clip_grads saw unscaled gradients
    for got, want in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(got, want)
    assert scaler.state_dict() == reference_scaler.state_dict()


def test_autocast_follows_the_device(make_context: MakeContext) -> None:
    context = make_context()
    model = context.wrap_model(torch.nn.Linear(2, 2))
    with context.autocast():
        assert model(torch.ones(1, 2)).dtype == torch.bfloat16
    with context.autocast(enabled=False):
        assert model(torch.ones(1, 2)).dtype == torch.float32


def test_a_loaded_trial_is_not_moved_or_wrapped(make_context: MakeContext) -> None:
    context = make_context(managed_training=False, aggregation_frequency=2)
    model = torch.nn.Linear(1, 1)
    assert context.wrap_model(model) is model
    assert context._should_communicate_and_update()  # no batch index needed


# -- experimental, and what is not supported ----------------------------------------------------


def test_experimental(make_context: MakeContext) -> None:
    context = make_context()
    assert context.experimental._auto_to_device and not context.experimental._data_repro_checks_disabled
    context.experimental.disable_auto_to_device()
    context.experimental.disable_dataset_reproducibility_checks()
    assert not context.experimental._auto_to_device and context.experimental._data_repro_checks_disabled
    with pytest.warns(FutureWarning, match="use context.wrap_reducer"):
        reducer = context.experimental.wrap_reducer(sum, name="total")
    reducer.update(2)
    assert context._reducers.reduce_metrics(for_training=True) == {"total": 2}
    context.experimental.reset_reducers()
    assert context._reducers.reduce_metrics(for_training=True) == {"total": 0}
    assert context.wrap_reducer(max, name="top") is not None


def test_amp_shortcuts_are_not_supported_and_say_what_to_use(make_context: MakeContext) -> None:
    context = make_context()
    with pytest.raises(NotImplementedError, match="use_amp.*torch.amp.*wrap_scaler"):
        context.experimental.use_amp()
    with pytest.raises(NotImplementedError, match="Apex.*torch.amp"):
        context.configure_apex_amp([], [])
