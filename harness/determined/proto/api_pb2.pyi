from determined.proto import events_pb2 as _events_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GetMasterRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetMasterResponse(_message.Message):
    __slots__ = ("version", "cluster_id", "cluster_name", "parts", "nats_url", "namespace", "http_port")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    PARTS_FIELD_NUMBER: _ClassVar[int]
    NATS_URL_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    HTTP_PORT_FIELD_NUMBER: _ClassVar[int]
    version: str
    cluster_id: str
    cluster_name: str
    parts: _containers.RepeatedCompositeFieldContainer[ClusterPart]
    nats_url: str
    namespace: str
    http_port: int
    def __init__(self, version: _Optional[str] = ..., cluster_id: _Optional[str] = ..., cluster_name: _Optional[str] = ..., parts: _Optional[_Iterable[_Union[ClusterPart, _Mapping]]] = ..., nats_url: _Optional[str] = ..., namespace: _Optional[str] = ..., http_port: _Optional[int] = ...) -> None: ...

class MasterLogsRequest(_message.Message):
    __slots__ = ("follow", "tail")
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    TAIL_FIELD_NUMBER: _ClassVar[int]
    follow: bool
    tail: int
    def __init__(self, follow: _Optional[bool] = ..., tail: _Optional[int] = ...) -> None: ...

class MasterLogsResponse(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[MasterLogEntry]
    def __init__(self, entries: _Optional[_Iterable[_Union[MasterLogEntry, _Mapping]]] = ...) -> None: ...

class MasterLogEntry(_message.Message):
    __slots__ = ("id", "timestamp_ns", "level", "message")
    ID_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_NS_FIELD_NUMBER: _ClassVar[int]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    id: int
    timestamp_ns: int
    level: str
    message: str
    def __init__(self, id: _Optional[int] = ..., timestamp_ns: _Optional[int] = ..., level: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class ClusterPart(_message.Message):
    __slots__ = ("name", "state", "pid", "restarts", "last_error", "started_at_ns", "disk_bytes")
    NAME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    RESTARTS_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_NS_FIELD_NUMBER: _ClassVar[int]
    DISK_BYTES_FIELD_NUMBER: _ClassVar[int]
    name: str
    state: str
    pid: int
    restarts: int
    last_error: str
    started_at_ns: int
    disk_bytes: int
    def __init__(self, name: _Optional[str] = ..., state: _Optional[str] = ..., pid: _Optional[int] = ..., restarts: _Optional[int] = ..., last_error: _Optional[str] = ..., started_at_ns: _Optional[int] = ..., disk_bytes: _Optional[int] = ...) -> None: ...

class UploadContextRequest(_message.Message):
    __slots__ = ("chunk", "context_hash")
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_HASH_FIELD_NUMBER: _ClassVar[int]
    chunk: bytes
    context_hash: str
    def __init__(self, chunk: _Optional[bytes] = ..., context_hash: _Optional[str] = ...) -> None: ...

class GetModelDefRequest(_message.Message):
    __slots__ = ("experiment_id",)
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    experiment_id: int
    def __init__(self, experiment_id: _Optional[int] = ...) -> None: ...

class GetModelDefResponse(_message.Message):
    __slots__ = ("context_tgz",)
    CONTEXT_TGZ_FIELD_NUMBER: _ClassVar[int]
    context_tgz: bytes
    def __init__(self, context_tgz: _Optional[bytes] = ...) -> None: ...

class UploadContextResponse(_message.Message):
    __slots__ = ("context_hash", "size_bytes")
    CONTEXT_HASH_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    context_hash: str
    size_bytes: int
    def __init__(self, context_hash: _Optional[str] = ..., size_bytes: _Optional[int] = ...) -> None: ...

class CreateExperimentRequest(_message.Message):
    __slots__ = ("config_yaml", "context_tgz", "activate", "validate_only", "request_id", "context_hash", "parent_id", "unmanaged")
    CONFIG_YAML_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_TGZ_FIELD_NUMBER: _ClassVar[int]
    ACTIVATE_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_HASH_FIELD_NUMBER: _ClassVar[int]
    PARENT_ID_FIELD_NUMBER: _ClassVar[int]
    UNMANAGED_FIELD_NUMBER: _ClassVar[int]
    config_yaml: str
    context_tgz: bytes
    activate: bool
    validate_only: bool
    request_id: str
    context_hash: str
    parent_id: int
    unmanaged: bool
    def __init__(self, config_yaml: _Optional[str] = ..., context_tgz: _Optional[bytes] = ..., activate: _Optional[bool] = ..., validate_only: _Optional[bool] = ..., request_id: _Optional[str] = ..., context_hash: _Optional[str] = ..., parent_id: _Optional[int] = ..., unmanaged: _Optional[bool] = ...) -> None: ...

class CreateExperimentResponse(_message.Message):
    __slots__ = ("experiment_id", "warnings", "config_json")
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    CONFIG_JSON_FIELD_NUMBER: _ClassVar[int]
    experiment_id: int
    warnings: _containers.RepeatedScalarFieldContainer[str]
    config_json: str
    def __init__(self, experiment_id: _Optional[int] = ..., warnings: _Optional[_Iterable[str]] = ..., config_json: _Optional[str] = ...) -> None: ...

class Experiment(_message.Message):
    __slots__ = ("id", "name", "owner", "state", "progress", "started_at_ns", "ended_at_ns", "description", "labels", "resource_pool", "searcher_name", "searcher_metric", "num_trials", "config_json", "context_hash", "end_reason", "best_trial_searcher_metric", "archived", "notes", "parent_id", "unmanaged")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_NS_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_NS_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_POOL_FIELD_NUMBER: _ClassVar[int]
    SEARCHER_NAME_FIELD_NUMBER: _ClassVar[int]
    SEARCHER_METRIC_FIELD_NUMBER: _ClassVar[int]
    NUM_TRIALS_FIELD_NUMBER: _ClassVar[int]
    CONFIG_JSON_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_HASH_FIELD_NUMBER: _ClassVar[int]
    END_REASON_FIELD_NUMBER: _ClassVar[int]
    BEST_TRIAL_SEARCHER_METRIC_FIELD_NUMBER: _ClassVar[int]
    ARCHIVED_FIELD_NUMBER: _ClassVar[int]
    NOTES_FIELD_NUMBER: _ClassVar[int]
    PARENT_ID_FIELD_NUMBER: _ClassVar[int]
    UNMANAGED_FIELD_NUMBER: _ClassVar[int]
    id: int
    name: str
    owner: str
    state: str
    progress: float
    started_at_ns: int
    ended_at_ns: int
    description: str
    labels: _containers.RepeatedScalarFieldContainer[str]
    resource_pool: str
    searcher_name: str
    searcher_metric: str
    num_trials: int
    config_json: str
    context_hash: str
    end_reason: str
    best_trial_searcher_metric: float
    archived: bool
    notes: str
    parent_id: int
    unmanaged: bool
    def __init__(self, id: _Optional[int] = ..., name: _Optional[str] = ..., owner: _Optional[str] = ..., state: _Optional[str] = ..., progress: _Optional[float] = ..., started_at_ns: _Optional[int] = ..., ended_at_ns: _Optional[int] = ..., description: _Optional[str] = ..., labels: _Optional[_Iterable[str]] = ..., resource_pool: _Optional[str] = ..., searcher_name: _Optional[str] = ..., searcher_metric: _Optional[str] = ..., num_trials: _Optional[int] = ..., config_json: _Optional[str] = ..., context_hash: _Optional[str] = ..., end_reason: _Optional[str] = ..., best_trial_searcher_metric: _Optional[float] = ..., archived: _Optional[bool] = ..., notes: _Optional[str] = ..., parent_id: _Optional[int] = ..., unmanaged: _Optional[bool] = ...) -> None: ...

class MetricPoint(_message.Message):
    __slots__ = ("group", "steps_completed", "metrics_json", "reported_at_ns")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    STEPS_COMPLETED_FIELD_NUMBER: _ClassVar[int]
    METRICS_JSON_FIELD_NUMBER: _ClassVar[int]
    REPORTED_AT_NS_FIELD_NUMBER: _ClassVar[int]
    group: str
    steps_completed: int
    metrics_json: str
    reported_at_ns: int
    def __init__(self, group: _Optional[str] = ..., steps_completed: _Optional[int] = ..., metrics_json: _Optional[str] = ..., reported_at_ns: _Optional[int] = ...) -> None: ...

class Checkpoint(_message.Message):
    __slots__ = ("uuid", "trial_id", "experiment_id", "steps_completed", "metadata_json", "resources", "reported_at_ns", "state", "validation_metrics_json", "searcher_metric", "storage_json", "model_versions", "delete_error")
    class ResourcesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    UUID_FIELD_NUMBER: _ClassVar[int]
    TRIAL_ID_FIELD_NUMBER: _ClassVar[int]
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    STEPS_COMPLETED_FIELD_NUMBER: _ClassVar[int]
    METADATA_JSON_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    REPORTED_AT_NS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    VALIDATION_METRICS_JSON_FIELD_NUMBER: _ClassVar[int]
    SEARCHER_METRIC_FIELD_NUMBER: _ClassVar[int]
    STORAGE_JSON_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    DELETE_ERROR_FIELD_NUMBER: _ClassVar[int]
    uuid: str
    trial_id: int
    experiment_id: int
    steps_completed: int
    metadata_json: str
    resources: _containers.ScalarMap[str, int]
    reported_at_ns: int
    state: str
    validation_metrics_json: str
    searcher_metric: float
    storage_json: str
    model_versions: _containers.RepeatedScalarFieldContainer[str]
    delete_error: str
    def __init__(self, uuid: _Optional[str] = ..., trial_id: _Optional[int] = ..., experiment_id: _Optional[int] = ..., steps_completed: _Optional[int] = ..., metadata_json: _Optional[str] = ..., resources: _Optional[_Mapping[str, int]] = ..., reported_at_ns: _Optional[int] = ..., state: _Optional[str] = ..., validation_metrics_json: _Optional[str] = ..., searcher_metric: _Optional[float] = ..., storage_json: _Optional[str] = ..., model_versions: _Optional[_Iterable[str]] = ..., delete_error: _Optional[str] = ...) -> None: ...

class Trial(_message.Message):
    __slots__ = ("id", "experiment_id", "state", "hparams_json", "started_at_ns", "ended_at_ns", "progress", "restarts", "total_batches", "latest_training", "latest_validation", "latest_checkpoint", "num_checkpoints", "trial_seed", "end_reason", "rung", "searcher_length", "status", "runs", "searcher_metric_value")
    ID_FIELD_NUMBER: _ClassVar[int]
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    HPARAMS_JSON_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_NS_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_NS_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    RESTARTS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BATCHES_FIELD_NUMBER: _ClassVar[int]
    LATEST_TRAINING_FIELD_NUMBER: _ClassVar[int]
    LATEST_VALIDATION_FIELD_NUMBER: _ClassVar[int]
    LATEST_CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    NUM_CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    TRIAL_SEED_FIELD_NUMBER: _ClassVar[int]
    END_REASON_FIELD_NUMBER: _ClassVar[int]
    RUNG_FIELD_NUMBER: _ClassVar[int]
    SEARCHER_LENGTH_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    SEARCHER_METRIC_VALUE_FIELD_NUMBER: _ClassVar[int]
    id: int
    experiment_id: int
    state: str
    hparams_json: str
    started_at_ns: int
    ended_at_ns: int
    progress: float
    restarts: int
    total_batches: int
    latest_training: MetricPoint
    latest_validation: MetricPoint
    latest_checkpoint: Checkpoint
    num_checkpoints: int
    trial_seed: int
    end_reason: str
    rung: int
    searcher_length: int
    status: str
    runs: int
    searcher_metric_value: float
    def __init__(self, id: _Optional[int] = ..., experiment_id: _Optional[int] = ..., state: _Optional[str] = ..., hparams_json: _Optional[str] = ..., started_at_ns: _Optional[int] = ..., ended_at_ns: _Optional[int] = ..., progress: _Optional[float] = ..., restarts: _Optional[int] = ..., total_batches: _Optional[int] = ..., latest_training: _Optional[_Union[MetricPoint, _Mapping]] = ..., latest_validation: _Optional[_Union[MetricPoint, _Mapping]] = ..., latest_checkpoint: _Optional[_Union[Checkpoint, _Mapping]] = ..., num_checkpoints: _Optional[int] = ..., trial_seed: _Optional[int] = ..., end_reason: _Optional[str] = ..., rung: _Optional[int] = ..., searcher_length: _Optional[int] = ..., status: _Optional[str] = ..., runs: _Optional[int] = ..., searcher_metric_value: _Optional[float] = ...) -> None: ...

class GetExperimentsRequest(_message.Message):
    __slots__ = ("limit", "offset", "archived", "name", "labels", "states", "users", "sort_by", "descending")
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    ARCHIVED_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    STATES_FIELD_NUMBER: _ClassVar[int]
    USERS_FIELD_NUMBER: _ClassVar[int]
    SORT_BY_FIELD_NUMBER: _ClassVar[int]
    DESCENDING_FIELD_NUMBER: _ClassVar[int]
    limit: int
    offset: int
    archived: bool
    name: str
    labels: _containers.RepeatedScalarFieldContainer[str]
    states: _containers.RepeatedScalarFieldContainer[str]
    users: _containers.RepeatedScalarFieldContainer[str]
    sort_by: str
    descending: bool
    def __init__(self, limit: _Optional[int] = ..., offset: _Optional[int] = ..., archived: _Optional[bool] = ..., name: _Optional[str] = ..., labels: _Optional[_Iterable[str]] = ..., states: _Optional[_Iterable[str]] = ..., users: _Optional[_Iterable[str]] = ..., sort_by: _Optional[str] = ..., descending: _Optional[bool] = ...) -> None: ...

class GetExperimentsResponse(_message.Message):
    __slots__ = ("experiments", "total")
    EXPERIMENTS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    experiments: _containers.RepeatedCompositeFieldContainer[Experiment]
    total: int
    def __init__(self, experiments: _Optional[_Iterable[_Union[Experiment, _Mapping]]] = ..., total: _Optional[int] = ...) -> None: ...

class AsOf(_message.Message):
    __slots__ = ("sequence", "time_ns")
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    TIME_NS_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    time_ns: int
    def __init__(self, sequence: _Optional[int] = ..., time_ns: _Optional[int] = ...) -> None: ...

class GetExperimentRequest(_message.Message):
    __slots__ = ("experiment_id", "as_of")
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    AS_OF_FIELD_NUMBER: _ClassVar[int]
    experiment_id: int
    as_of: AsOf
    def __init__(self, experiment_id: _Optional[int] = ..., as_of: _Optional[_Union[AsOf, _Mapping]] = ...) -> None: ...

class GetExperimentResponse(_message.Message):
    __slots__ = ("experiment", "trials", "as_of")
    EXPERIMENT_FIELD_NUMBER: _ClassVar[int]
    TRIALS_FIELD_NUMBER: _ClassVar[int]
    AS_OF_FIELD_NUMBER: _ClassVar[int]
    experiment: Experiment
    trials: _containers.RepeatedCompositeFieldContainer[Trial]
    as_of: AsOf
    def __init__(self, experiment: _Optional[_Union[Experiment, _Mapping]] = ..., trials: _Optional[_Iterable[_Union[Trial, _Mapping]]] = ..., as_of: _Optional[_Union[AsOf, _Mapping]] = ...) -> None: ...

class GetExperimentTrialsRequest(_message.Message):
    __slots__ = ("experiment_id", "as_of")
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    AS_OF_FIELD_NUMBER: _ClassVar[int]
    experiment_id: int
    as_of: AsOf
    def __init__(self, experiment_id: _Optional[int] = ..., as_of: _Optional[_Union[AsOf, _Mapping]] = ...) -> None: ...

class GetExperimentTrialsResponse(_message.Message):
    __slots__ = ("trials", "as_of")
    TRIALS_FIELD_NUMBER: _ClassVar[int]
    AS_OF_FIELD_NUMBER: _ClassVar[int]
    trials: _containers.RepeatedCompositeFieldContainer[Trial]
    as_of: AsOf
    def __init__(self, trials: _Optional[_Iterable[_Union[Trial, _Mapping]]] = ..., as_of: _Optional[_Union[AsOf, _Mapping]] = ...) -> None: ...

class KillExperimentRequest(_message.Message):
    __slots__ = ("experiment_id",)
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    experiment_id: int
    def __init__(self, experiment_id: _Optional[int] = ...) -> None: ...

class KillExperimentResponse(_message.Message):
    __slots__ = ("unchanged_reason",)
    UNCHANGED_REASON_FIELD_NUMBER: _ClassVar[int]
    unchanged_reason: str
    def __init__(self, unchanged_reason: _Optional[str] = ...) -> None: ...

class ActivateExperimentRequest(_message.Message):
    __slots__ = ("experiment_id",)
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    experiment_id: int
    def __init__(self, experiment_id: _Optional[int] = ...) -> None: ...

class ActivateExperimentResponse(_message.Message):
    __slots__ = ("unchanged_reason",)
    UNCHANGED_REASON_FIELD_NUMBER: _ClassVar[int]
    unchanged_reason: str
    def __init__(self, unchanged_reason: _Optional[str] = ...) -> None: ...

class PauseExperimentRequest(_message.Message):
    __slots__ = ("experiment_id",)
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    experiment_id: int
    def __init__(self, experiment_id: _Optional[int] = ...) -> None: ...

class PauseExperimentResponse(_message.Message):
    __slots__ = ("unchanged_reason",)
    UNCHANGED_REASON_FIELD_NUMBER: _ClassVar[int]
    unchanged_reason: str
    def __init__(self, unchanged_reason: _Optional[str] = ...) -> None: ...

class CancelExperimentRequest(_message.Message):
    __slots__ = ("experiment_id",)
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    experiment_id: int
    def __init__(self, experiment_id: _Optional[int] = ...) -> None: ...

class CancelExperimentResponse(_message.Message):
    __slots__ = ("unchanged_reason",)
    UNCHANGED_REASON_FIELD_NUMBER: _ClassVar[int]
    unchanged_reason: str
    def __init__(self, unchanged_reason: _Optional[str] = ...) -> None: ...

class ArchiveExperimentRequest(_message.Message):
    __slots__ = ("experiment_id",)
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    experiment_id: int
    def __init__(self, experiment_id: _Optional[int] = ...) -> None: ...

class ArchiveExperimentResponse(_message.Message):
    __slots__ = ("unchanged_reason",)
    UNCHANGED_REASON_FIELD_NUMBER: _ClassVar[int]
    unchanged_reason: str
    def __init__(self, unchanged_reason: _Optional[str] = ...) -> None: ...

class UnarchiveExperimentRequest(_message.Message):
    __slots__ = ("experiment_id",)
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    experiment_id: int
    def __init__(self, experiment_id: _Optional[int] = ...) -> None: ...

class UnarchiveExperimentResponse(_message.Message):
    __slots__ = ("unchanged_reason",)
    UNCHANGED_REASON_FIELD_NUMBER: _ClassVar[int]
    unchanged_reason: str
    def __init__(self, unchanged_reason: _Optional[str] = ...) -> None: ...

class PatchExperimentRequest(_message.Message):
    __slots__ = ("experiment_id", "name", "description", "notes", "labels")
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    NOTES_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    experiment_id: int
    name: str
    description: str
    notes: str
    labels: _events_pb2.ExperimentLabels
    def __init__(self, experiment_id: _Optional[int] = ..., name: _Optional[str] = ..., description: _Optional[str] = ..., notes: _Optional[str] = ..., labels: _Optional[_Union[_events_pb2.ExperimentLabels, _Mapping]] = ...) -> None: ...

class PatchExperimentResponse(_message.Message):
    __slots__ = ("experiment",)
    EXPERIMENT_FIELD_NUMBER: _ClassVar[int]
    experiment: Experiment
    def __init__(self, experiment: _Optional[_Union[Experiment, _Mapping]] = ...) -> None: ...

class PutExperimentLabelRequest(_message.Message):
    __slots__ = ("experiment_id", "label")
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    experiment_id: int
    label: str
    def __init__(self, experiment_id: _Optional[int] = ..., label: _Optional[str] = ...) -> None: ...

class PutExperimentLabelResponse(_message.Message):
    __slots__ = ("labels",)
    LABELS_FIELD_NUMBER: _ClassVar[int]
    labels: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, labels: _Optional[_Iterable[str]] = ...) -> None: ...

class DeleteExperimentLabelRequest(_message.Message):
    __slots__ = ("experiment_id", "label")
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    experiment_id: int
    label: str
    def __init__(self, experiment_id: _Optional[int] = ..., label: _Optional[str] = ...) -> None: ...

class DeleteExperimentLabelResponse(_message.Message):
    __slots__ = ("labels",)
    LABELS_FIELD_NUMBER: _ClassVar[int]
    labels: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, labels: _Optional[_Iterable[str]] = ...) -> None: ...

class ContinueExperimentRequest(_message.Message):
    __slots__ = ("experiment_id", "override_config_yaml")
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    OVERRIDE_CONFIG_YAML_FIELD_NUMBER: _ClassVar[int]
    experiment_id: int
    override_config_yaml: str
    def __init__(self, experiment_id: _Optional[int] = ..., override_config_yaml: _Optional[str] = ...) -> None: ...

class ContinueExperimentResponse(_message.Message):
    __slots__ = ("experiment",)
    EXPERIMENT_FIELD_NUMBER: _ClassVar[int]
    experiment: Experiment
    def __init__(self, experiment: _Optional[_Union[Experiment, _Mapping]] = ...) -> None: ...

class KillTrialRequest(_message.Message):
    __slots__ = ("trial_id",)
    TRIAL_ID_FIELD_NUMBER: _ClassVar[int]
    trial_id: int
    def __init__(self, trial_id: _Optional[int] = ...) -> None: ...

class KillTrialResponse(_message.Message):
    __slots__ = ("unchanged_reason",)
    UNCHANGED_REASON_FIELD_NUMBER: _ClassVar[int]
    unchanged_reason: str
    def __init__(self, unchanged_reason: _Optional[str] = ...) -> None: ...

class GetTrialRequest(_message.Message):
    __slots__ = ("trial_id",)
    TRIAL_ID_FIELD_NUMBER: _ClassVar[int]
    trial_id: int
    def __init__(self, trial_id: _Optional[int] = ...) -> None: ...

class GetTrialResponse(_message.Message):
    __slots__ = ("trial", "checkpoints", "metrics", "runs")
    TRIAL_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    trial: Trial
    checkpoints: _containers.RepeatedCompositeFieldContainer[Checkpoint]
    metrics: _containers.RepeatedCompositeFieldContainer[MetricPoint]
    runs: _containers.RepeatedCompositeFieldContainer[TrialRun]
    def __init__(self, trial: _Optional[_Union[Trial, _Mapping]] = ..., checkpoints: _Optional[_Iterable[_Union[Checkpoint, _Mapping]]] = ..., metrics: _Optional[_Iterable[_Union[MetricPoint, _Mapping]]] = ..., runs: _Optional[_Iterable[_Union[TrialRun, _Mapping]]] = ...) -> None: ...

class TrialRun(_message.Message):
    __slots__ = ("allocation_id", "trial_run_id", "agent_ids", "state", "exit_code", "reason", "requested_at_ns", "assigned_at_ns", "exited_at_ns")
    ALLOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    TRIAL_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_IDS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_AT_NS_FIELD_NUMBER: _ClassVar[int]
    ASSIGNED_AT_NS_FIELD_NUMBER: _ClassVar[int]
    EXITED_AT_NS_FIELD_NUMBER: _ClassVar[int]
    allocation_id: str
    trial_run_id: int
    agent_ids: _containers.RepeatedScalarFieldContainer[str]
    state: str
    exit_code: int
    reason: str
    requested_at_ns: int
    assigned_at_ns: int
    exited_at_ns: int
    def __init__(self, allocation_id: _Optional[str] = ..., trial_run_id: _Optional[int] = ..., agent_ids: _Optional[_Iterable[str]] = ..., state: _Optional[str] = ..., exit_code: _Optional[int] = ..., reason: _Optional[str] = ..., requested_at_ns: _Optional[int] = ..., assigned_at_ns: _Optional[int] = ..., exited_at_ns: _Optional[int] = ...) -> None: ...

class TrialLogsRequest(_message.Message):
    __slots__ = ("trial_id", "follow", "rank", "limit", "tail", "agent_ids", "container_ids", "rank_ids", "levels", "stdtypes", "sources", "timestamp_before_ns", "timestamp_after_ns", "search_text")
    TRIAL_ID_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    TAIL_FIELD_NUMBER: _ClassVar[int]
    AGENT_IDS_FIELD_NUMBER: _ClassVar[int]
    CONTAINER_IDS_FIELD_NUMBER: _ClassVar[int]
    RANK_IDS_FIELD_NUMBER: _ClassVar[int]
    LEVELS_FIELD_NUMBER: _ClassVar[int]
    STDTYPES_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_BEFORE_NS_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_AFTER_NS_FIELD_NUMBER: _ClassVar[int]
    SEARCH_TEXT_FIELD_NUMBER: _ClassVar[int]
    trial_id: int
    follow: bool
    rank: int
    limit: int
    tail: bool
    agent_ids: _containers.RepeatedScalarFieldContainer[str]
    container_ids: _containers.RepeatedScalarFieldContainer[str]
    rank_ids: _containers.RepeatedScalarFieldContainer[int]
    levels: _containers.RepeatedScalarFieldContainer[str]
    stdtypes: _containers.RepeatedScalarFieldContainer[str]
    sources: _containers.RepeatedScalarFieldContainer[str]
    timestamp_before_ns: int
    timestamp_after_ns: int
    search_text: str
    def __init__(self, trial_id: _Optional[int] = ..., follow: _Optional[bool] = ..., rank: _Optional[int] = ..., limit: _Optional[int] = ..., tail: _Optional[bool] = ..., agent_ids: _Optional[_Iterable[str]] = ..., container_ids: _Optional[_Iterable[str]] = ..., rank_ids: _Optional[_Iterable[int]] = ..., levels: _Optional[_Iterable[str]] = ..., stdtypes: _Optional[_Iterable[str]] = ..., sources: _Optional[_Iterable[str]] = ..., timestamp_before_ns: _Optional[int] = ..., timestamp_after_ns: _Optional[int] = ..., search_text: _Optional[str] = ...) -> None: ...

class TrialLogsResponse(_message.Message):
    __slots__ = ("trial_id", "allocation_id", "agent_id", "lines")
    TRIAL_ID_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    LINES_FIELD_NUMBER: _ClassVar[int]
    trial_id: int
    allocation_id: str
    agent_id: str
    lines: _containers.RepeatedCompositeFieldContainer[_events_pb2.LogLine]
    def __init__(self, trial_id: _Optional[int] = ..., allocation_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., lines: _Optional[_Iterable[_Union[_events_pb2.LogLine, _Mapping]]] = ...) -> None: ...

class GetTrialMetricsRequest(_message.Message):
    __slots__ = ("trial_id", "group")
    TRIAL_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    trial_id: int
    group: str
    def __init__(self, trial_id: _Optional[int] = ..., group: _Optional[str] = ...) -> None: ...

class GetTrialMetricsResponse(_message.Message):
    __slots__ = ("points",)
    POINTS_FIELD_NUMBER: _ClassVar[int]
    points: _containers.RepeatedCompositeFieldContainer[MetricPoint]
    def __init__(self, points: _Optional[_Iterable[_Union[MetricPoint, _Mapping]]] = ...) -> None: ...

class Agent(_message.Message):
    __slots__ = ("agent_id", "hostname", "slots", "registered_at_ns", "resource_pool", "address", "state", "slot_uses", "runtime")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_AT_NS_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_POOL_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    SLOT_USES_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    hostname: str
    slots: _containers.RepeatedCompositeFieldContainer[_events_pb2.Slot]
    registered_at_ns: int
    resource_pool: str
    address: str
    state: str
    slot_uses: _containers.RepeatedCompositeFieldContainer[SlotUse]
    runtime: str
    def __init__(self, agent_id: _Optional[str] = ..., hostname: _Optional[str] = ..., slots: _Optional[_Iterable[_Union[_events_pb2.Slot, _Mapping]]] = ..., registered_at_ns: _Optional[int] = ..., resource_pool: _Optional[str] = ..., address: _Optional[str] = ..., state: _Optional[str] = ..., slot_uses: _Optional[_Iterable[_Union[SlotUse, _Mapping]]] = ..., runtime: _Optional[str] = ...) -> None: ...

class SlotUse(_message.Message):
    __slots__ = ("slot_id", "allocation_id", "trial_id", "experiment_id", "state")
    SLOT_ID_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    TRIAL_ID_FIELD_NUMBER: _ClassVar[int]
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    slot_id: int
    allocation_id: str
    trial_id: int
    experiment_id: int
    state: str
    def __init__(self, slot_id: _Optional[int] = ..., allocation_id: _Optional[str] = ..., trial_id: _Optional[int] = ..., experiment_id: _Optional[int] = ..., state: _Optional[str] = ...) -> None: ...

class GetAgentsRequest(_message.Message):
    __slots__ = ("as_of",)
    AS_OF_FIELD_NUMBER: _ClassVar[int]
    as_of: AsOf
    def __init__(self, as_of: _Optional[_Union[AsOf, _Mapping]] = ...) -> None: ...

class GetAgentsResponse(_message.Message):
    __slots__ = ("agents", "as_of")
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    AS_OF_FIELD_NUMBER: _ClassVar[int]
    agents: _containers.RepeatedCompositeFieldContainer[Agent]
    as_of: AsOf
    def __init__(self, agents: _Optional[_Iterable[_Union[Agent, _Mapping]]] = ..., as_of: _Optional[_Union[AsOf, _Mapping]] = ...) -> None: ...

class ReportMetricsRequest(_message.Message):
    __slots__ = ("trial_id", "trial_run_id", "batch_seq", "reports", "reporter_id")
    TRIAL_ID_FIELD_NUMBER: _ClassVar[int]
    TRIAL_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    BATCH_SEQ_FIELD_NUMBER: _ClassVar[int]
    REPORTS_FIELD_NUMBER: _ClassVar[int]
    REPORTER_ID_FIELD_NUMBER: _ClassVar[int]
    trial_id: int
    trial_run_id: int
    batch_seq: int
    reports: _containers.RepeatedCompositeFieldContainer[_events_pb2.MetricReport]
    reporter_id: str
    def __init__(self, trial_id: _Optional[int] = ..., trial_run_id: _Optional[int] = ..., batch_seq: _Optional[int] = ..., reports: _Optional[_Iterable[_Union[_events_pb2.MetricReport, _Mapping]]] = ..., reporter_id: _Optional[str] = ...) -> None: ...

class ReportMetricsResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ReportProgressRequest(_message.Message):
    __slots__ = ("trial_id", "progress", "reporter_id", "seq")
    TRIAL_ID_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    REPORTER_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    trial_id: int
    progress: float
    reporter_id: str
    seq: int
    def __init__(self, trial_id: _Optional[int] = ..., progress: _Optional[float] = ..., reporter_id: _Optional[str] = ..., seq: _Optional[int] = ...) -> None: ...

class ReportProgressResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ReportCheckpointRequest(_message.Message):
    __slots__ = ("uuid", "trial_id", "allocation_id", "steps_completed", "metadata_json", "resources")
    class ResourcesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    UUID_FIELD_NUMBER: _ClassVar[int]
    TRIAL_ID_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    STEPS_COMPLETED_FIELD_NUMBER: _ClassVar[int]
    METADATA_JSON_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    uuid: str
    trial_id: int
    allocation_id: str
    steps_completed: int
    metadata_json: str
    resources: _containers.ScalarMap[str, int]
    def __init__(self, uuid: _Optional[str] = ..., trial_id: _Optional[int] = ..., allocation_id: _Optional[str] = ..., steps_completed: _Optional[int] = ..., metadata_json: _Optional[str] = ..., resources: _Optional[_Mapping[str, int]] = ...) -> None: ...

class ReportCheckpointResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ReportStatusRequest(_message.Message):
    __slots__ = ("trial_id", "status", "reporter_id", "seq")
    TRIAL_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REPORTER_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    trial_id: int
    status: str
    reporter_id: str
    seq: int
    def __init__(self, trial_id: _Optional[int] = ..., status: _Optional[str] = ..., reporter_id: _Optional[str] = ..., seq: _Optional[int] = ...) -> None: ...

class ReportStatusResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StartUnmanagedTrialRequest(_message.Message):
    __slots__ = ("experiment_id",)
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    experiment_id: int
    def __init__(self, experiment_id: _Optional[int] = ...) -> None: ...

class StartUnmanagedTrialResponse(_message.Message):
    __slots__ = ("trial_id", "hparams_json", "trial_seed", "config_json", "heartbeat_s", "heartbeat_timeout_s")
    TRIAL_ID_FIELD_NUMBER: _ClassVar[int]
    HPARAMS_JSON_FIELD_NUMBER: _ClassVar[int]
    TRIAL_SEED_FIELD_NUMBER: _ClassVar[int]
    CONFIG_JSON_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_S_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    trial_id: int
    hparams_json: str
    trial_seed: int
    config_json: str
    heartbeat_s: float
    heartbeat_timeout_s: float
    def __init__(self, trial_id: _Optional[int] = ..., hparams_json: _Optional[str] = ..., trial_seed: _Optional[int] = ..., config_json: _Optional[str] = ..., heartbeat_s: _Optional[float] = ..., heartbeat_timeout_s: _Optional[float] = ...) -> None: ...

class ReportUnmanagedTrialRequest(_message.Message):
    __slots__ = ("trial_id", "end_state", "reason", "reporter_id", "seq")
    TRIAL_ID_FIELD_NUMBER: _ClassVar[int]
    END_STATE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    REPORTER_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    trial_id: int
    end_state: str
    reason: str
    reporter_id: str
    seq: int
    def __init__(self, trial_id: _Optional[int] = ..., end_state: _Optional[str] = ..., reason: _Optional[str] = ..., reporter_id: _Optional[str] = ..., seq: _Optional[int] = ...) -> None: ...

class ReportUnmanagedTrialResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WatchAllocationRequest(_message.Message):
    __slots__ = ("allocation_id", "stop", "searcher_length", "timeout_s")
    ALLOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    SEARCHER_LENGTH_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    allocation_id: str
    stop: bool
    searcher_length: int
    timeout_s: float
    def __init__(self, allocation_id: _Optional[str] = ..., stop: _Optional[bool] = ..., searcher_length: _Optional[int] = ..., timeout_s: _Optional[float] = ...) -> None: ...

class WatchAllocationResponse(_message.Message):
    __slots__ = ("stop", "reason", "searcher_length", "searcher_stopped")
    STOP_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SEARCHER_LENGTH_FIELD_NUMBER: _ClassVar[int]
    SEARCHER_STOPPED_FIELD_NUMBER: _ClassVar[int]
    stop: bool
    reason: str
    searcher_length: int
    searcher_stopped: bool
    def __init__(self, stop: _Optional[bool] = ..., reason: _Optional[str] = ..., searcher_length: _Optional[int] = ..., searcher_stopped: _Optional[bool] = ...) -> None: ...

class AcknowledgeStopRequest(_message.Message):
    __slots__ = ("allocation_id",)
    ALLOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    allocation_id: str
    def __init__(self, allocation_id: _Optional[str] = ...) -> None: ...

class AcknowledgeStopResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetBestValidationRequest(_message.Message):
    __slots__ = ("trial_id",)
    TRIAL_ID_FIELD_NUMBER: _ClassVar[int]
    trial_id: int
    def __init__(self, trial_id: _Optional[int] = ...) -> None: ...

class GetBestValidationResponse(_message.Message):
    __slots__ = ("found", "metric")
    FOUND_FIELD_NUMBER: _ClassVar[int]
    METRIC_FIELD_NUMBER: _ClassVar[int]
    found: bool
    metric: float
    def __init__(self, found: _Optional[bool] = ..., metric: _Optional[float] = ...) -> None: ...

class ReportEarlyExitRequest(_message.Message):
    __slots__ = ("trial_id", "reason")
    TRIAL_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    trial_id: int
    reason: str
    def __init__(self, trial_id: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class ReportEarlyExitResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SetTrialMetadataRequest(_message.Message):
    __slots__ = ("trial_id", "metadata_json")
    TRIAL_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_JSON_FIELD_NUMBER: _ClassVar[int]
    trial_id: int
    metadata_json: str
    def __init__(self, trial_id: _Optional[int] = ..., metadata_json: _Optional[str] = ...) -> None: ...

class SetTrialMetadataResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetTrialMetadataRequest(_message.Message):
    __slots__ = ("trial_id",)
    TRIAL_ID_FIELD_NUMBER: _ClassVar[int]
    trial_id: int
    def __init__(self, trial_id: _Optional[int] = ...) -> None: ...

class GetTrialMetadataResponse(_message.Message):
    __slots__ = ("metadata_json",)
    METADATA_JSON_FIELD_NUMBER: _ClassVar[int]
    metadata_json: str
    def __init__(self, metadata_json: _Optional[str] = ...) -> None: ...

class EnableAgentRequest(_message.Message):
    __slots__ = ("agent_id",)
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    def __init__(self, agent_id: _Optional[str] = ...) -> None: ...

class EnableAgentResponse(_message.Message):
    __slots__ = ("unchanged_reason",)
    UNCHANGED_REASON_FIELD_NUMBER: _ClassVar[int]
    unchanged_reason: str
    def __init__(self, unchanged_reason: _Optional[str] = ...) -> None: ...

class EnableSlotRequest(_message.Message):
    __slots__ = ("agent_id", "slot_id")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    SLOT_ID_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    slot_id: int
    def __init__(self, agent_id: _Optional[str] = ..., slot_id: _Optional[int] = ...) -> None: ...

class EnableSlotResponse(_message.Message):
    __slots__ = ("agent",)
    AGENT_FIELD_NUMBER: _ClassVar[int]
    agent: Agent
    def __init__(self, agent: _Optional[_Union[Agent, _Mapping]] = ...) -> None: ...

class DisableSlotRequest(_message.Message):
    __slots__ = ("agent_id", "slot_id", "drain")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    SLOT_ID_FIELD_NUMBER: _ClassVar[int]
    DRAIN_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    slot_id: int
    drain: bool
    def __init__(self, agent_id: _Optional[str] = ..., slot_id: _Optional[int] = ..., drain: _Optional[bool] = ...) -> None: ...

class DisableSlotResponse(_message.Message):
    __slots__ = ("agent",)
    AGENT_FIELD_NUMBER: _ClassVar[int]
    agent: Agent
    def __init__(self, agent: _Optional[_Union[Agent, _Mapping]] = ...) -> None: ...

class DisableAgentRequest(_message.Message):
    __slots__ = ("agent_id", "drain")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    DRAIN_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    drain: bool
    def __init__(self, agent_id: _Optional[str] = ..., drain: _Optional[bool] = ...) -> None: ...

class DisableAgentResponse(_message.Message):
    __slots__ = ("unchanged_reason",)
    UNCHANGED_REASON_FIELD_NUMBER: _ClassVar[int]
    unchanged_reason: str
    def __init__(self, unchanged_reason: _Optional[str] = ...) -> None: ...

class GetJobsRequest(_message.Message):
    __slots__ = ("resource_pool", "as_of")
    RESOURCE_POOL_FIELD_NUMBER: _ClassVar[int]
    AS_OF_FIELD_NUMBER: _ClassVar[int]
    resource_pool: str
    as_of: AsOf
    def __init__(self, resource_pool: _Optional[str] = ..., as_of: _Optional[_Union[AsOf, _Mapping]] = ...) -> None: ...

class Job(_message.Message):
    __slots__ = ("job_id", "type", "name", "experiment_id", "owner", "resource_pool", "priority", "weight", "max_slots", "submitted_at_ns", "slots_needed", "slots_acquired", "state", "position", "waiting_reason")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_POOL_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    MAX_SLOTS_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_AT_NS_FIELD_NUMBER: _ClassVar[int]
    SLOTS_NEEDED_FIELD_NUMBER: _ClassVar[int]
    SLOTS_ACQUIRED_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    WAITING_REASON_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    type: str
    name: str
    experiment_id: int
    owner: str
    resource_pool: str
    priority: int
    weight: float
    max_slots: int
    submitted_at_ns: int
    slots_needed: int
    slots_acquired: int
    state: str
    position: int
    waiting_reason: str
    def __init__(self, job_id: _Optional[str] = ..., type: _Optional[str] = ..., name: _Optional[str] = ..., experiment_id: _Optional[int] = ..., owner: _Optional[str] = ..., resource_pool: _Optional[str] = ..., priority: _Optional[int] = ..., weight: _Optional[float] = ..., max_slots: _Optional[int] = ..., submitted_at_ns: _Optional[int] = ..., slots_needed: _Optional[int] = ..., slots_acquired: _Optional[int] = ..., state: _Optional[str] = ..., position: _Optional[int] = ..., waiting_reason: _Optional[str] = ...) -> None: ...

class GetJobsResponse(_message.Message):
    __slots__ = ("jobs", "schedulers", "as_of")
    class SchedulersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    JOBS_FIELD_NUMBER: _ClassVar[int]
    SCHEDULERS_FIELD_NUMBER: _ClassVar[int]
    AS_OF_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[Job]
    schedulers: _containers.ScalarMap[str, str]
    as_of: AsOf
    def __init__(self, jobs: _Optional[_Iterable[_Union[Job, _Mapping]]] = ..., schedulers: _Optional[_Mapping[str, str]] = ..., as_of: _Optional[_Union[AsOf, _Mapping]] = ...) -> None: ...

class UpdateJobRequest(_message.Message):
    __slots__ = ("job_id", "priority", "weight", "max_slots")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    MAX_SLOTS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    priority: int
    weight: float
    max_slots: int
    def __init__(self, job_id: _Optional[str] = ..., priority: _Optional[int] = ..., weight: _Optional[float] = ..., max_slots: _Optional[int] = ...) -> None: ...

class UpdateJobResponse(_message.Message):
    __slots__ = ("unchanged_reason",)
    UNCHANGED_REASON_FIELD_NUMBER: _ClassVar[int]
    unchanged_reason: str
    def __init__(self, unchanged_reason: _Optional[str] = ...) -> None: ...

class GetCheckpointRequest(_message.Message):
    __slots__ = ("uuid",)
    UUID_FIELD_NUMBER: _ClassVar[int]
    uuid: str
    def __init__(self, uuid: _Optional[str] = ...) -> None: ...

class GetCheckpointResponse(_message.Message):
    __slots__ = ("checkpoint",)
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    checkpoint: Checkpoint
    def __init__(self, checkpoint: _Optional[_Union[Checkpoint, _Mapping]] = ...) -> None: ...

class GetExperimentCheckpointsRequest(_message.Message):
    __slots__ = ("experiment_id", "sort_by", "order_by", "max_results", "include_deleted")
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    SORT_BY_FIELD_NUMBER: _ClassVar[int]
    ORDER_BY_FIELD_NUMBER: _ClassVar[int]
    MAX_RESULTS_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_DELETED_FIELD_NUMBER: _ClassVar[int]
    experiment_id: int
    sort_by: str
    order_by: str
    max_results: int
    include_deleted: bool
    def __init__(self, experiment_id: _Optional[int] = ..., sort_by: _Optional[str] = ..., order_by: _Optional[str] = ..., max_results: _Optional[int] = ..., include_deleted: _Optional[bool] = ...) -> None: ...

class GetTrialCheckpointsRequest(_message.Message):
    __slots__ = ("trial_id", "sort_by", "order_by", "max_results", "include_deleted")
    TRIAL_ID_FIELD_NUMBER: _ClassVar[int]
    SORT_BY_FIELD_NUMBER: _ClassVar[int]
    ORDER_BY_FIELD_NUMBER: _ClassVar[int]
    MAX_RESULTS_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_DELETED_FIELD_NUMBER: _ClassVar[int]
    trial_id: int
    sort_by: str
    order_by: str
    max_results: int
    include_deleted: bool
    def __init__(self, trial_id: _Optional[int] = ..., sort_by: _Optional[str] = ..., order_by: _Optional[str] = ..., max_results: _Optional[int] = ..., include_deleted: _Optional[bool] = ...) -> None: ...

class GetCheckpointsResponse(_message.Message):
    __slots__ = ("checkpoints",)
    CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    checkpoints: _containers.RepeatedCompositeFieldContainer[Checkpoint]
    def __init__(self, checkpoints: _Optional[_Iterable[_Union[Checkpoint, _Mapping]]] = ...) -> None: ...

class DeleteCheckpointsRequest(_message.Message):
    __slots__ = ("uuids", "globs")
    UUIDS_FIELD_NUMBER: _ClassVar[int]
    GLOBS_FIELD_NUMBER: _ClassVar[int]
    uuids: _containers.RepeatedScalarFieldContainer[str]
    globs: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, uuids: _Optional[_Iterable[str]] = ..., globs: _Optional[_Iterable[str]] = ...) -> None: ...

class DeleteCheckpointsResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PreviewGcRequest(_message.Message):
    __slots__ = ("experiment_id", "save_experiment_best", "save_trial_best", "save_trial_latest")
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    SAVE_EXPERIMENT_BEST_FIELD_NUMBER: _ClassVar[int]
    SAVE_TRIAL_BEST_FIELD_NUMBER: _ClassVar[int]
    SAVE_TRIAL_LATEST_FIELD_NUMBER: _ClassVar[int]
    experiment_id: int
    save_experiment_best: int
    save_trial_best: int
    save_trial_latest: int
    def __init__(self, experiment_id: _Optional[int] = ..., save_experiment_best: _Optional[int] = ..., save_trial_best: _Optional[int] = ..., save_trial_latest: _Optional[int] = ...) -> None: ...

class PreviewGcResponse(_message.Message):
    __slots__ = ("checkpoints", "bytes")
    CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    checkpoints: _containers.RepeatedCompositeFieldContainer[Checkpoint]
    bytes: int
    def __init__(self, checkpoints: _Optional[_Iterable[_Union[Checkpoint, _Mapping]]] = ..., bytes: _Optional[int] = ...) -> None: ...

class SetGcPolicyRequest(_message.Message):
    __slots__ = ("experiment_id", "save_experiment_best", "save_trial_best", "save_trial_latest")
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    SAVE_EXPERIMENT_BEST_FIELD_NUMBER: _ClassVar[int]
    SAVE_TRIAL_BEST_FIELD_NUMBER: _ClassVar[int]
    SAVE_TRIAL_LATEST_FIELD_NUMBER: _ClassVar[int]
    experiment_id: int
    save_experiment_best: int
    save_trial_best: int
    save_trial_latest: int
    def __init__(self, experiment_id: _Optional[int] = ..., save_experiment_best: _Optional[int] = ..., save_trial_best: _Optional[int] = ..., save_trial_latest: _Optional[int] = ...) -> None: ...

class SetGcPolicyResponse(_message.Message):
    __slots__ = ("unchanged_reason",)
    UNCHANGED_REASON_FIELD_NUMBER: _ClassVar[int]
    unchanged_reason: str
    def __init__(self, unchanged_reason: _Optional[str] = ...) -> None: ...

class DeleteExperimentRequest(_message.Message):
    __slots__ = ("experiment_id",)
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    experiment_id: int
    def __init__(self, experiment_id: _Optional[int] = ...) -> None: ...

class DeleteExperimentResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DownloadCheckpointFileRequest(_message.Message):
    __slots__ = ("uuid", "path", "offset")
    UUID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    uuid: str
    path: str
    offset: int
    def __init__(self, uuid: _Optional[str] = ..., path: _Optional[str] = ..., offset: _Optional[int] = ...) -> None: ...

class DownloadCheckpointFileResponse(_message.Message):
    __slots__ = ("data", "offset", "size")
    DATA_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    offset: int
    size: int
    def __init__(self, data: _Optional[bytes] = ..., offset: _Optional[int] = ..., size: _Optional[int] = ...) -> None: ...

class ModelVersion(_message.Message):
    __slots__ = ("model_name", "version", "checkpoint", "name", "comment", "owner", "registered_at_ns")
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    COMMENT_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_AT_NS_FIELD_NUMBER: _ClassVar[int]
    model_name: str
    version: int
    checkpoint: Checkpoint
    name: str
    comment: str
    owner: str
    registered_at_ns: int
    def __init__(self, model_name: _Optional[str] = ..., version: _Optional[int] = ..., checkpoint: _Optional[_Union[Checkpoint, _Mapping]] = ..., name: _Optional[str] = ..., comment: _Optional[str] = ..., owner: _Optional[str] = ..., registered_at_ns: _Optional[int] = ...) -> None: ...

class Model(_message.Message):
    __slots__ = ("model_id", "name", "description", "metadata_json", "labels", "owner", "created_at_ns", "num_versions", "versions")
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    METADATA_JSON_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_NS_FIELD_NUMBER: _ClassVar[int]
    NUM_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    model_id: int
    name: str
    description: str
    metadata_json: str
    labels: _containers.RepeatedScalarFieldContainer[str]
    owner: str
    created_at_ns: int
    num_versions: int
    versions: _containers.RepeatedCompositeFieldContainer[ModelVersion]
    def __init__(self, model_id: _Optional[int] = ..., name: _Optional[str] = ..., description: _Optional[str] = ..., metadata_json: _Optional[str] = ..., labels: _Optional[_Iterable[str]] = ..., owner: _Optional[str] = ..., created_at_ns: _Optional[int] = ..., num_versions: _Optional[int] = ..., versions: _Optional[_Iterable[_Union[ModelVersion, _Mapping]]] = ...) -> None: ...

class CreateModelRequest(_message.Message):
    __slots__ = ("name", "description", "metadata_json", "labels")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    METADATA_JSON_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    metadata_json: str
    labels: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., metadata_json: _Optional[str] = ..., labels: _Optional[_Iterable[str]] = ...) -> None: ...

class CreateModelResponse(_message.Message):
    __slots__ = ("model",)
    MODEL_FIELD_NUMBER: _ClassVar[int]
    model: Model
    def __init__(self, model: _Optional[_Union[Model, _Mapping]] = ...) -> None: ...

class GetModelsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetModelsResponse(_message.Message):
    __slots__ = ("models",)
    MODELS_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[Model]
    def __init__(self, models: _Optional[_Iterable[_Union[Model, _Mapping]]] = ...) -> None: ...

class GetModelRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class GetModelResponse(_message.Message):
    __slots__ = ("model",)
    MODEL_FIELD_NUMBER: _ClassVar[int]
    model: Model
    def __init__(self, model: _Optional[_Union[Model, _Mapping]] = ...) -> None: ...

class RegisterModelVersionRequest(_message.Message):
    __slots__ = ("model_name", "checkpoint_uuid", "name", "comment")
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_UUID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    COMMENT_FIELD_NUMBER: _ClassVar[int]
    model_name: str
    checkpoint_uuid: str
    name: str
    comment: str
    def __init__(self, model_name: _Optional[str] = ..., checkpoint_uuid: _Optional[str] = ..., name: _Optional[str] = ..., comment: _Optional[str] = ...) -> None: ...

class RegisterModelVersionResponse(_message.Message):
    __slots__ = ("version",)
    VERSION_FIELD_NUMBER: _ClassVar[int]
    version: ModelVersion
    def __init__(self, version: _Optional[_Union[ModelVersion, _Mapping]] = ...) -> None: ...

class User(_message.Message):
    __slots__ = ("id", "username", "display_name", "admin", "active", "created_at_ns")
    ID_FIELD_NUMBER: _ClassVar[int]
    USERNAME_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
    ADMIN_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_NS_FIELD_NUMBER: _ClassVar[int]
    id: int
    username: str
    display_name: str
    admin: bool
    active: bool
    created_at_ns: int
    def __init__(self, id: _Optional[int] = ..., username: _Optional[str] = ..., display_name: _Optional[str] = ..., admin: _Optional[bool] = ..., active: _Optional[bool] = ..., created_at_ns: _Optional[int] = ...) -> None: ...

class LoginRequest(_message.Message):
    __slots__ = ("username", "password", "is_hashed")
    USERNAME_FIELD_NUMBER: _ClassVar[int]
    PASSWORD_FIELD_NUMBER: _ClassVar[int]
    IS_HASHED_FIELD_NUMBER: _ClassVar[int]
    username: str
    password: str
    is_hashed: bool
    def __init__(self, username: _Optional[str] = ..., password: _Optional[str] = ..., is_hashed: _Optional[bool] = ...) -> None: ...

class LoginResponse(_message.Message):
    __slots__ = ("token", "user", "expires_at_ns")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_NS_FIELD_NUMBER: _ClassVar[int]
    token: str
    user: User
    expires_at_ns: int
    def __init__(self, token: _Optional[str] = ..., user: _Optional[_Union[User, _Mapping]] = ..., expires_at_ns: _Optional[int] = ...) -> None: ...

class LogoutRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class LogoutResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetMeRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetMeResponse(_message.Message):
    __slots__ = ("user",)
    USER_FIELD_NUMBER: _ClassVar[int]
    user: User
    def __init__(self, user: _Optional[_Union[User, _Mapping]] = ...) -> None: ...

class GetUsersRequest(_message.Message):
    __slots__ = ("include_inactive",)
    INCLUDE_INACTIVE_FIELD_NUMBER: _ClassVar[int]
    include_inactive: bool
    def __init__(self, include_inactive: _Optional[bool] = ...) -> None: ...

class GetUsersResponse(_message.Message):
    __slots__ = ("users",)
    USERS_FIELD_NUMBER: _ClassVar[int]
    users: _containers.RepeatedCompositeFieldContainer[User]
    def __init__(self, users: _Optional[_Iterable[_Union[User, _Mapping]]] = ...) -> None: ...

class CreateUserRequest(_message.Message):
    __slots__ = ("username", "display_name", "admin", "password", "is_hashed")
    USERNAME_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
    ADMIN_FIELD_NUMBER: _ClassVar[int]
    PASSWORD_FIELD_NUMBER: _ClassVar[int]
    IS_HASHED_FIELD_NUMBER: _ClassVar[int]
    username: str
    display_name: str
    admin: bool
    password: str
    is_hashed: bool
    def __init__(self, username: _Optional[str] = ..., display_name: _Optional[str] = ..., admin: _Optional[bool] = ..., password: _Optional[str] = ..., is_hashed: _Optional[bool] = ...) -> None: ...

class CreateUserResponse(_message.Message):
    __slots__ = ("user",)
    USER_FIELD_NUMBER: _ClassVar[int]
    user: User
    def __init__(self, user: _Optional[_Union[User, _Mapping]] = ...) -> None: ...

class UpdateUserRequest(_message.Message):
    __slots__ = ("username", "new_username", "display_name", "admin", "active")
    USERNAME_FIELD_NUMBER: _ClassVar[int]
    NEW_USERNAME_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
    ADMIN_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_FIELD_NUMBER: _ClassVar[int]
    username: str
    new_username: str
    display_name: str
    admin: bool
    active: bool
    def __init__(self, username: _Optional[str] = ..., new_username: _Optional[str] = ..., display_name: _Optional[str] = ..., admin: _Optional[bool] = ..., active: _Optional[bool] = ...) -> None: ...

class UpdateUserResponse(_message.Message):
    __slots__ = ("user", "unchanged_reason")
    USER_FIELD_NUMBER: _ClassVar[int]
    UNCHANGED_REASON_FIELD_NUMBER: _ClassVar[int]
    user: User
    unchanged_reason: str
    def __init__(self, user: _Optional[_Union[User, _Mapping]] = ..., unchanged_reason: _Optional[str] = ...) -> None: ...

class SetUserPasswordRequest(_message.Message):
    __slots__ = ("username", "password", "is_hashed")
    USERNAME_FIELD_NUMBER: _ClassVar[int]
    PASSWORD_FIELD_NUMBER: _ClassVar[int]
    IS_HASHED_FIELD_NUMBER: _ClassVar[int]
    username: str
    password: str
    is_hashed: bool
    def __init__(self, username: _Optional[str] = ..., password: _Optional[str] = ..., is_hashed: _Optional[bool] = ...) -> None: ...

class SetUserPasswordResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class LaunchTaskRequest(_message.Message):
    __slots__ = ("task_type", "config_yaml", "context_hash", "command", "experiment_ids", "trial_ids", "shell_public_key", "request_id")
    TASK_TYPE_FIELD_NUMBER: _ClassVar[int]
    CONFIG_YAML_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_HASH_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    EXPERIMENT_IDS_FIELD_NUMBER: _ClassVar[int]
    TRIAL_IDS_FIELD_NUMBER: _ClassVar[int]
    SHELL_PUBLIC_KEY_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    task_type: str
    config_yaml: str
    context_hash: str
    command: _containers.RepeatedScalarFieldContainer[str]
    experiment_ids: _containers.RepeatedScalarFieldContainer[int]
    trial_ids: _containers.RepeatedScalarFieldContainer[int]
    shell_public_key: str
    request_id: str
    def __init__(self, task_type: _Optional[str] = ..., config_yaml: _Optional[str] = ..., context_hash: _Optional[str] = ..., command: _Optional[_Iterable[str]] = ..., experiment_ids: _Optional[_Iterable[int]] = ..., trial_ids: _Optional[_Iterable[int]] = ..., shell_public_key: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class LaunchTaskResponse(_message.Message):
    __slots__ = ("task", "warnings")
    TASK_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    task: Task
    warnings: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, task: _Optional[_Union[Task, _Mapping]] = ..., warnings: _Optional[_Iterable[str]] = ...) -> None: ...

class Task(_message.Message):
    __slots__ = ("id", "task_type", "description", "owner", "state", "allocation_id", "resource_pool", "slots", "priority", "agent_id", "start_time_ns", "end_time_ns", "exit_code", "exit_reason", "ready", "config_json", "command", "experiment_ids", "trial_ids", "job_id")
    ID_FIELD_NUMBER: _ClassVar[int]
    TASK_TYPE_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_POOL_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    START_TIME_NS_FIELD_NUMBER: _ClassVar[int]
    END_TIME_NS_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    EXIT_REASON_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    CONFIG_JSON_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    EXPERIMENT_IDS_FIELD_NUMBER: _ClassVar[int]
    TRIAL_IDS_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    task_type: str
    description: str
    owner: str
    state: str
    allocation_id: str
    resource_pool: str
    slots: int
    priority: int
    agent_id: str
    start_time_ns: int
    end_time_ns: int
    exit_code: int
    exit_reason: str
    ready: bool
    config_json: str
    command: _containers.RepeatedScalarFieldContainer[str]
    experiment_ids: _containers.RepeatedScalarFieldContainer[int]
    trial_ids: _containers.RepeatedScalarFieldContainer[int]
    job_id: str
    def __init__(self, id: _Optional[str] = ..., task_type: _Optional[str] = ..., description: _Optional[str] = ..., owner: _Optional[str] = ..., state: _Optional[str] = ..., allocation_id: _Optional[str] = ..., resource_pool: _Optional[str] = ..., slots: _Optional[int] = ..., priority: _Optional[int] = ..., agent_id: _Optional[str] = ..., start_time_ns: _Optional[int] = ..., end_time_ns: _Optional[int] = ..., exit_code: _Optional[int] = ..., exit_reason: _Optional[str] = ..., ready: _Optional[bool] = ..., config_json: _Optional[str] = ..., command: _Optional[_Iterable[str]] = ..., experiment_ids: _Optional[_Iterable[int]] = ..., trial_ids: _Optional[_Iterable[int]] = ..., job_id: _Optional[str] = ...) -> None: ...

class GetTasksRequest(_message.Message):
    __slots__ = ("task_type", "include_terminated")
    TASK_TYPE_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_TERMINATED_FIELD_NUMBER: _ClassVar[int]
    task_type: str
    include_terminated: bool
    def __init__(self, task_type: _Optional[str] = ..., include_terminated: _Optional[bool] = ...) -> None: ...

class GetTasksResponse(_message.Message):
    __slots__ = ("tasks",)
    TASKS_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[Task]
    def __init__(self, tasks: _Optional[_Iterable[_Union[Task, _Mapping]]] = ...) -> None: ...

class GetTaskRequest(_message.Message):
    __slots__ = ("task_id",)
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    def __init__(self, task_id: _Optional[str] = ...) -> None: ...

class GetTaskResponse(_message.Message):
    __slots__ = ("task",)
    TASK_FIELD_NUMBER: _ClassVar[int]
    task: Task
    def __init__(self, task: _Optional[_Union[Task, _Mapping]] = ...) -> None: ...

class KillTaskRequest(_message.Message):
    __slots__ = ("task_id",)
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    def __init__(self, task_id: _Optional[str] = ...) -> None: ...

class KillTaskResponse(_message.Message):
    __slots__ = ("unchanged_reason",)
    UNCHANGED_REASON_FIELD_NUMBER: _ClassVar[int]
    unchanged_reason: str
    def __init__(self, unchanged_reason: _Optional[str] = ...) -> None: ...

class TaskLogsRequest(_message.Message):
    __slots__ = ("task_id", "follow")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    follow: bool
    def __init__(self, task_id: _Optional[str] = ..., follow: _Optional[bool] = ...) -> None: ...

class TaskLogsResponse(_message.Message):
    __slots__ = ("task_id", "allocation_id", "agent_id", "lines")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    LINES_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    allocation_id: str
    agent_id: str
    lines: _containers.RepeatedCompositeFieldContainer[_events_pb2.LogLine]
    def __init__(self, task_id: _Optional[str] = ..., allocation_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., lines: _Optional[_Iterable[_Union[_events_pb2.LogLine, _Mapping]]] = ...) -> None: ...

class EventFilter(_message.Message):
    __slots__ = ("experiment_id", "trial_id", "allocation_id", "task_id", "user", "types", "since_ns", "until_ns", "from_sequence")
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    TRIAL_ID_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    TYPES_FIELD_NUMBER: _ClassVar[int]
    SINCE_NS_FIELD_NUMBER: _ClassVar[int]
    UNTIL_NS_FIELD_NUMBER: _ClassVar[int]
    FROM_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    experiment_id: int
    trial_id: int
    allocation_id: str
    task_id: str
    user: str
    types: _containers.RepeatedScalarFieldContainer[str]
    since_ns: int
    until_ns: int
    from_sequence: int
    def __init__(self, experiment_id: _Optional[int] = ..., trial_id: _Optional[int] = ..., allocation_id: _Optional[str] = ..., task_id: _Optional[str] = ..., user: _Optional[str] = ..., types: _Optional[_Iterable[str]] = ..., since_ns: _Optional[int] = ..., until_ns: _Optional[int] = ..., from_sequence: _Optional[int] = ...) -> None: ...

class LoggedEvent(_message.Message):
    __slots__ = ("sequence", "occurred_at_ns", "aggregate", "type", "actor", "reason", "summary", "event_id", "causation_id", "causation_sequence", "correlation_id", "payload_json")
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    OCCURRED_AT_NS_FIELD_NUMBER: _ClassVar[int]
    AGGREGATE_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    CAUSATION_ID_FIELD_NUMBER: _ClassVar[int]
    CAUSATION_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    CORRELATION_ID_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_JSON_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    occurred_at_ns: int
    aggregate: str
    type: str
    actor: str
    reason: str
    summary: str
    event_id: str
    causation_id: str
    causation_sequence: int
    correlation_id: str
    payload_json: str
    def __init__(self, sequence: _Optional[int] = ..., occurred_at_ns: _Optional[int] = ..., aggregate: _Optional[str] = ..., type: _Optional[str] = ..., actor: _Optional[str] = ..., reason: _Optional[str] = ..., summary: _Optional[str] = ..., event_id: _Optional[str] = ..., causation_id: _Optional[str] = ..., causation_sequence: _Optional[int] = ..., correlation_id: _Optional[str] = ..., payload_json: _Optional[str] = ...) -> None: ...

class GetEventsRequest(_message.Message):
    __slots__ = ("filter", "follow", "limit", "tail")
    FILTER_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    TAIL_FIELD_NUMBER: _ClassVar[int]
    filter: EventFilter
    follow: bool
    limit: int
    tail: bool
    def __init__(self, filter: _Optional[_Union[EventFilter, _Mapping]] = ..., follow: _Optional[bool] = ..., limit: _Optional[int] = ..., tail: _Optional[bool] = ...) -> None: ...

class GetEventsResponse(_message.Message):
    __slots__ = ("events",)
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[LoggedEvent]
    def __init__(self, events: _Optional[_Iterable[_Union[LoggedEvent, _Mapping]]] = ...) -> None: ...

class ExplainEventsRequest(_message.Message):
    __slots__ = ("kind", "id")
    KIND_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    kind: str
    id: str
    def __init__(self, kind: _Optional[str] = ..., id: _Optional[str] = ...) -> None: ...

class ExplainedEvent(_message.Message):
    __slots__ = ("event", "depth")
    EVENT_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    event: LoggedEvent
    depth: int
    def __init__(self, event: _Optional[_Union[LoggedEvent, _Mapping]] = ..., depth: _Optional[int] = ...) -> None: ...

class ExplainEventsResponse(_message.Message):
    __slots__ = ("chain", "outcome")
    CHAIN_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    chain: _containers.RepeatedCompositeFieldContainer[ExplainedEvent]
    outcome: str
    def __init__(self, chain: _Optional[_Iterable[_Union[ExplainedEvent, _Mapping]]] = ..., outcome: _Optional[str] = ...) -> None: ...

class GetWorkloadRequest(_message.Message):
    __slots__ = ("since_ns", "until_ns")
    SINCE_NS_FIELD_NUMBER: _ClassVar[int]
    UNTIL_NS_FIELD_NUMBER: _ClassVar[int]
    since_ns: int
    until_ns: int
    def __init__(self, since_ns: _Optional[int] = ..., until_ns: _Optional[int] = ...) -> None: ...

class RecordedAllocation(_message.Message):
    __slots__ = ("allocation_id", "task_id", "job_id", "task_type", "owner", "resource_pool", "slots", "priority", "weight", "max_slots", "preemptible", "requested_at_ns", "assigned_at_ns", "ended_at_ns", "placements", "run_ns", "requested_sequence", "assigned_sequence", "ended_sequence", "stop_requested_at_ns", "stop_sequence", "preempted")
    ALLOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_TYPE_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_POOL_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    MAX_SLOTS_FIELD_NUMBER: _ClassVar[int]
    PREEMPTIBLE_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_AT_NS_FIELD_NUMBER: _ClassVar[int]
    ASSIGNED_AT_NS_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_NS_FIELD_NUMBER: _ClassVar[int]
    PLACEMENTS_FIELD_NUMBER: _ClassVar[int]
    RUN_NS_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    ASSIGNED_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    ENDED_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    STOP_REQUESTED_AT_NS_FIELD_NUMBER: _ClassVar[int]
    STOP_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    PREEMPTED_FIELD_NUMBER: _ClassVar[int]
    allocation_id: str
    task_id: str
    job_id: str
    task_type: str
    owner: str
    resource_pool: str
    slots: int
    priority: int
    weight: float
    max_slots: int
    preemptible: bool
    requested_at_ns: int
    assigned_at_ns: int
    ended_at_ns: int
    placements: _containers.RepeatedCompositeFieldContainer[_events_pb2.Placement]
    run_ns: int
    requested_sequence: int
    assigned_sequence: int
    ended_sequence: int
    stop_requested_at_ns: int
    stop_sequence: int
    preempted: bool
    def __init__(self, allocation_id: _Optional[str] = ..., task_id: _Optional[str] = ..., job_id: _Optional[str] = ..., task_type: _Optional[str] = ..., owner: _Optional[str] = ..., resource_pool: _Optional[str] = ..., slots: _Optional[int] = ..., priority: _Optional[int] = ..., weight: _Optional[float] = ..., max_slots: _Optional[int] = ..., preemptible: _Optional[bool] = ..., requested_at_ns: _Optional[int] = ..., assigned_at_ns: _Optional[int] = ..., ended_at_ns: _Optional[int] = ..., placements: _Optional[_Iterable[_Union[_events_pb2.Placement, _Mapping]]] = ..., run_ns: _Optional[int] = ..., requested_sequence: _Optional[int] = ..., assigned_sequence: _Optional[int] = ..., ended_sequence: _Optional[int] = ..., stop_requested_at_ns: _Optional[int] = ..., stop_sequence: _Optional[int] = ..., preempted: _Optional[bool] = ...) -> None: ...

class RecordedAgent(_message.Message):
    __slots__ = ("agent_id", "resource_pool", "slots", "registered_at_ns", "lost_at_ns", "registered_sequence", "lost_sequence")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_POOL_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_AT_NS_FIELD_NUMBER: _ClassVar[int]
    LOST_AT_NS_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    LOST_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    resource_pool: str
    slots: int
    registered_at_ns: int
    lost_at_ns: int
    registered_sequence: int
    lost_sequence: int
    def __init__(self, agent_id: _Optional[str] = ..., resource_pool: _Optional[str] = ..., slots: _Optional[int] = ..., registered_at_ns: _Optional[int] = ..., lost_at_ns: _Optional[int] = ..., registered_sequence: _Optional[int] = ..., lost_sequence: _Optional[int] = ...) -> None: ...

class GetWorkloadResponse(_message.Message):
    __slots__ = ("allocations", "agents", "pool_schedulers", "first_sequence", "last_sequence")
    class PoolSchedulersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ALLOCATIONS_FIELD_NUMBER: _ClassVar[int]
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    POOL_SCHEDULERS_FIELD_NUMBER: _ClassVar[int]
    FIRST_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    allocations: _containers.RepeatedCompositeFieldContainer[RecordedAllocation]
    agents: _containers.RepeatedCompositeFieldContainer[RecordedAgent]
    pool_schedulers: _containers.ScalarMap[str, str]
    first_sequence: int
    last_sequence: int
    def __init__(self, allocations: _Optional[_Iterable[_Union[RecordedAllocation, _Mapping]]] = ..., agents: _Optional[_Iterable[_Union[RecordedAgent, _Mapping]]] = ..., pool_schedulers: _Optional[_Mapping[str, str]] = ..., first_sequence: _Optional[int] = ..., last_sequence: _Optional[int] = ...) -> None: ...

class PostCheckpointMetadataRequest(_message.Message):
    __slots__ = ("uuid", "metadata_json")
    UUID_FIELD_NUMBER: _ClassVar[int]
    METADATA_JSON_FIELD_NUMBER: _ClassVar[int]
    uuid: str
    metadata_json: str
    def __init__(self, uuid: _Optional[str] = ..., metadata_json: _Optional[str] = ...) -> None: ...

class PostCheckpointMetadataResponse(_message.Message):
    __slots__ = ("checkpoint",)
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    checkpoint: Checkpoint
    def __init__(self, checkpoint: _Optional[_Union[Checkpoint, _Mapping]] = ...) -> None: ...

class GetCheckpointUsersRequest(_message.Message):
    __slots__ = ("uuid",)
    UUID_FIELD_NUMBER: _ClassVar[int]
    uuid: str
    def __init__(self, uuid: _Optional[str] = ...) -> None: ...

class GetCheckpointUsersResponse(_message.Message):
    __slots__ = ("trial_ids",)
    TRIAL_IDS_FIELD_NUMBER: _ClassVar[int]
    trial_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, trial_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class ReportCheckpointUseRequest(_message.Message):
    __slots__ = ("trial_id", "checkpoint_uuid")
    TRIAL_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_UUID_FIELD_NUMBER: _ClassVar[int]
    trial_id: int
    checkpoint_uuid: str
    def __init__(self, trial_id: _Optional[int] = ..., checkpoint_uuid: _Optional[str] = ...) -> None: ...

class ReportCheckpointUseResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
