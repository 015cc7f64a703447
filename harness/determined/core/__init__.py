"""The Core API: `with det.core.init() as core_context:` and its parts.

One private module per capability; `init()` (in `_context`) wires them, on a cluster or,
with null objects, off it.
"""

from determined.core._checkpoint import CheckpointContext, DownloadMode
from determined.core._context import Context, init
from determined.core._distributed import DistributedContext, DummyDistributedContext
from determined.core._errors import InvalidHP, ReportError, ReportTooLargeError, UnserializableValueError
from determined.core._experimental import DummyExperimentalCoreContext, ExperimentalCoreContext
from determined.core._preempt import DummyPreemptContext, PreemptContext, PreemptMode
from determined.core._profiler import DummyProfilerContext, ProfilerContext
from determined.core._searcher import SearcherContext, SearcherMode, SearcherOperation, Unit
from determined.core._train import DummyTrainContext, EarlyExitReason, TensorboardMode, TrainContext

__all__ = [
    "CheckpointContext",
    "Context",
    "DistributedContext",
    "DownloadMode",
    "DummyDistributedContext",
    "DummyExperimentalCoreContext",
    "DummyPreemptContext",
    "DummyProfilerContext",
    "DummyTrainContext",
    "EarlyExitReason",
    "ExperimentalCoreContext",
    "InvalidHP",
    "PreemptContext",
    "PreemptMode",
    "ProfilerContext",
    "ReportError",
    "ReportTooLargeError",
    "SearcherContext",
    "SearcherMode",
    "SearcherOperation",
    "TensorboardMode",
    "TrainContext",
    "Unit",
    "UnserializableValueError",
    "init",
]
