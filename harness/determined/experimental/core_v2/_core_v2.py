"""core_v2's configs and its two initializers, as Determined 0.38 names them.

`init()` makes one Core API context the package's globals (`core_v2.train`, `.checkpoint`, ...)
and closes it at exit; `init_context()` returns it for a `with` block. On the cluster (a
trial's environment) the context is `det.core.init()`'s and the configs are ignored; anywhere
else the script becomes a detached run (_detached.py).
"""

from __future__ import annotations

import atexit
import dataclasses
import sys
import warnings
from typing import TYPE_CHECKING, Any

from determined import _info
from determined.core._context import Context
from determined.core._distributed import DistributedContext
from determined.core._preempt import PreemptMode
from determined.core._train import TensorboardMode

if TYPE_CHECKING:
    from determined.experimental._determined import Determined

_GLOBALS = ("train", "checkpoint", "distributed", "preempt", "searcher", "info")
_context: Context | None = None
_client: Determined | None = None
_atexit_registered = False


@dataclasses.dataclass
class Config:
    """What a detached run's experiment is (ignored on the cluster, where the experiment's
    config says it). `searcher` is what the web UI shows (default: single, metric
    "unmanaged"); `hparams` are the run's hyperparameters. External experiment and trial
    ids (resuming a detached run) are not supported here."""

    name: str | None = None
    hparams: dict[str, Any] | None = None
    data: dict[str, Any] | None = None
    description: str | None = None
    labels: list[str] | None = None
    workspace: str | None = None
    project: str | None = None
    checkpoint_storage: str | dict[str, Any] | None = None
    searcher: dict[str, Any] | None = None
    external_experiment_id: str | None = None
    external_trial_id: str | None = None


class DefaultConfig(Config):
    """Deprecated in Determined 0.38: use `Config`."""

    def __init__(self, **kwargs: Any) -> None:
        warnings.warn("DefaultConfig is deprecated: use Config", FutureWarning, stacklevel=2)
        super().__init__(**kwargs)


class UnmanagedConfig(Config):
    """Deprecated in Determined 0.38: use `Config`."""

    def __init__(self, **kwargs: Any) -> None:
        warnings.warn("UnmanagedConfig is deprecated: use Config", FutureWarning, stacklevel=2)
        super().__init__(**kwargs)


def init_context(
    *,
    config: Config | None = None,
    defaults: DefaultConfig | None = None,
    unmanaged: UnmanagedConfig | None = None,
    client: Determined | None = None,
    distributed: DistributedContext | None = None,
    checkpoint_storage: str | dict[str, Any] | None = None,
    preempt_mode: PreemptMode = PreemptMode.WorkersAskChief,
    tensorboard_mode: TensorboardMode = TensorboardMode.AUTO,
) -> Context:
    """The Core API context, for `with core_v2.init_context(config=...) as core_context:`."""
    info = _info.get_cluster_info()
    if info is not None and info.task_type == "TRIAL":
        from determined.core import init as managed

        return managed(
            distributed=distributed,
            checkpoint_storage=checkpoint_storage,
            preempt_mode=preempt_mode,
            tensorboard_mode=tensorboard_mode,
        )
    from determined.experimental.core_v2._detached import detached_context

    merged = _merged(config, defaults, unmanaged)
    if merged.external_experiment_id or merged.external_trial_id:
        raise NotImplementedError(
            "external experiment and trial ids (resuming a detached run) are not supported"
        )
    return detached_context(
        client or _default_client(),
        merged,
        distributed,
        checkpoint_storage,
        preempt_mode,
        tensorboard_mode,
    )


def init(
    *,
    config: Config | None = None,
    defaults: DefaultConfig | None = None,
    unmanaged: UnmanagedConfig | None = None,
    client: Determined | None = None,
    distributed: DistributedContext | None = None,
    checkpoint_storage: str | dict[str, Any] | None = None,
    preempt_mode: PreemptMode = PreemptMode.WorkersAskChief,
    tensorboard_mode: TensorboardMode = TensorboardMode.AUTO,
) -> None:
    """Starts the Core API context and makes it the package's globals (`core_v2.train`, ...);
    `close()` (or the script's exit) ends it. A second init closes the first context."""
    global _context, _client, _atexit_registered
    if _context is not None:
        close()
    _client = client or (None if _info.get_cluster_info() else _default_client())
    _context = init_context(
        config=config,
        defaults=defaults,
        unmanaged=unmanaged,
        client=_client,
        distributed=distributed,
        checkpoint_storage=checkpoint_storage,
        preempt_mode=preempt_mode,
        tensorboard_mode=tensorboard_mode,
    )
    _context.start()
    _set_globals(_context)
    if not _atexit_registered:
        atexit.register(close)
        _atexit_registered = True


def close() -> None:
    """Sends every queued report and, for a detached run, how the script ended."""
    global _context
    context, _context = _context, None
    try:
        if context is not None:
            context.close()
    finally:
        _set_globals(None)


def url_reverse_webui_exp_view() -> str:
    """The web UI's page of the running context's experiment."""
    package = sys.modules["determined.experimental.core_v2"]
    info = package.info
    if info is None or info._trial_info is None:
        raise RuntimeError("core_v2.init() has not made a trial's context")
    return _experiment_url(info.master_url, info.trial.experiment_id)


def _experiment_url(master_url: str, experiment_id: int) -> str:
    """The gateway serves the web UI on its HTTP port: the gRPC port + 1 (det deploy local)."""
    scheme, _, address = master_url.rpartition("://")
    host, _, port = address.rpartition(":")
    web = f"{host}:{int(port) + 1}" if port.isdigit() else address
    return f"{scheme or 'http'}://{web}/#/experiments/{experiment_id}"


def _set_globals(context: Context | None) -> None:
    package = sys.modules["determined.experimental.core_v2"]
    for name in _GLOBALS:
        setattr(package, name, getattr(context, name) if context is not None else None)


def _default_client() -> Determined:
    """As Determined's SDK connects: $DET_MASTER, and the CLI's login (or DET_USER/DET_PASS)."""
    from determined.experimental._determined import Determined

    return Determined()


def _merged(
    config: Config | None, defaults: DefaultConfig | None, unmanaged: UnmanagedConfig | None
) -> Config:
    """`config`, or the deprecated `defaults` with `unmanaged`'s ids and workspace (Determined's rule)."""
    if defaults is not None or unmanaged is not None:
        warnings.warn("`defaults` and `unmanaged` are deprecated: pass `config`", FutureWarning, stacklevel=3)
    if config is not None:
        return config
    if defaults is None:
        raise ValueError("either specify `defaults` or `config`, or run as a managed determined experiment")
    if unmanaged is not None:
        defaults.project = defaults.project or unmanaged.project
        defaults.workspace = defaults.workspace or unmanaged.workspace
        defaults.external_experiment_id = defaults.external_experiment_id or unmanaged.external_experiment_id
        defaults.external_trial_id = defaults.external_trial_id or unmanaged.external_trial_id
    return defaults
