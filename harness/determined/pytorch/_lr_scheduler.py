"""`LRScheduler`: a torch LR scheduler with the step mode that says who steps it and when."""

import enum
from typing import Any


class LRScheduler:
    """What `context.wrap_lr_scheduler()` records about a torch scheduler.

    Step modes (with `frequency` N):
    - STEP_EVERY_EPOCH: the Trainer steps it after every N-th epoch;
    - STEP_EVERY_BATCH: the Trainer steps it after every N-th batch;
    - STEP_EVERY_OPTIMIZER_STEP: `context.step_optimizer()` steps it after every N-th step
      of its optimizer (with gradient aggregation, once per aggregated step);
    - MANUAL_STEP: your code calls `step()`; the Trainer only checkpoints it.
    """

    class StepMode(enum.Enum):
        STEP_EVERY_EPOCH = 1
        STEP_EVERY_BATCH = 2
        MANUAL_STEP = 3
        STEP_EVERY_OPTIMIZER_STEP = 4

    def __init__(self, scheduler: Any, step_mode: "LRScheduler.StepMode", frequency: int = 1) -> None:
        if not isinstance(step_mode, LRScheduler.StepMode):
            raise TypeError(f"step_mode must be a det.pytorch.LRScheduler.StepMode, got {step_mode!r}")
        if isinstance(frequency, bool) or not isinstance(frequency, int) or frequency < 1:
            raise ValueError(f"frequency must be an integer of at least 1, got {frequency!r}")
        self._scheduler = scheduler
        self._step_mode = step_mode
        self._frequency = frequency

    def step(self, *args: Any, **kwargs: Any) -> None:
        """Step the torch scheduler (arguments pass through, e.g. a metric for
        ReduceLROnPlateau)."""
        self._scheduler.step(*args, **kwargs)

    def get_last_lr(self) -> list[float]:
        last_lr: list[float] = self._scheduler.get_last_lr()
        return last_lr

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = self._scheduler.state_dict()
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._scheduler.load_state_dict(state_dict)
