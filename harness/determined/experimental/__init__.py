"""The Python SDK: `from determined.experimental import client` (or the names below, as
Determined 0.38 exports them here).

Importing this package loads nothing heavy; `client` talks to the master with
the CLI's gRPC client, connecting on first use.
"""

from determined.experimental import client
from determined.experimental._unsupported import unsupported_method
from determined.experimental.client import (
    Checkpoint,
    CheckpointOrderBy,
    CheckpointSortBy,
    Determined,
    DownloadMode,
    Experiment,
    ExperimentOrderBy,
    ExperimentSortBy,
    ExperimentState,
    Model,
    ModelOrderBy,
    ModelSortBy,
    ModelVersion,
    OrderBy,
    Project,
    Trial,
    TrialMetrics,
    TrialOrderBy,
    TrialSortBy,
    TrialState,
    User,
)

# Determined's older names.
ExperimentReference = Experiment
TrialReference = Trial

test_one_batch = unsupported_method(
    "test_one_batch", "check a model definition with `det experiment create --test CONFIG DIR` instead"
)

__all__ = [
    "Checkpoint",
    "CheckpointOrderBy",
    "CheckpointSortBy",
    "Determined",
    "DownloadMode",
    "Experiment",
    "ExperimentOrderBy",
    "ExperimentReference",
    "ExperimentSortBy",
    "ExperimentState",
    "Model",
    "ModelOrderBy",
    "ModelSortBy",
    "ModelVersion",
    "OrderBy",
    "Project",
    "Trial",
    "TrialMetrics",
    "TrialOrderBy",
    "TrialReference",
    "TrialSortBy",
    "TrialState",
    "User",
    "client",
    "test_one_batch",
]
