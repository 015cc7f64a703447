"""Determined's core_v2: the Core API for a script that runs anywhere (a detached run) or
on the cluster, unchanged:

    from determined.experimental import core_v2

    core_v2.init(config=core_v2.Config(name="my-run", hparams={"lr": 0.01}))
    for step in range(1, 101):
        core_v2.train.report_training_metrics(steps_completed=step, metrics={"loss": 1 / step})
    with core_v2.checkpoint.store_path({"steps_completed": 100}) as (path, uuid):
        (path / "model.txt").write_text("weights")
    core_v2.close()

Off the cluster, with $DET_MASTER and a login (`det user login`, or DET_USER/DET_PASS), the
script becomes an unmanaged experiment's one trial: its metrics and checkpoints show in
`det experiment describe` and the web UI, and its trial ends COMPLETED at `close()` (or the
script's exit), ERROR if an exception ended the script or once its heartbeats stop. Launched
by the cluster as an experiment's entrypoint, the same script reports as any trial does.

The globals below are the running context's parts after `init()` (None before and after).
"""

from typing import TYPE_CHECKING

from determined.core import DistributedContext, PreemptMode, TensorboardMode
from determined.experimental.core_v2._core_v2 import (
    Config,
    DefaultConfig,
    UnmanagedConfig,
    close,
    init,
    init_context,
    url_reverse_webui_exp_view,
)

if TYPE_CHECKING:
    from determined import _info, core

train: "core.TrainContext | None" = None
distributed: "core.DistributedContext | None" = None
preempt: "core.PreemptContext | None" = None
checkpoint: "core.CheckpointContext | None" = None
searcher: "core.SearcherContext | None" = None
info: "_info.ClusterInfo | None" = None

__all__ = [
    "Config",
    "DefaultConfig",
    "DistributedContext",
    "PreemptMode",
    "TensorboardMode",
    "UnmanagedConfig",
    "checkpoint",
    "close",
    "distributed",
    "info",
    "init",
    "init_context",
    "preempt",
    "searcher",
    "train",
    "url_reverse_webui_exp_view",
]
