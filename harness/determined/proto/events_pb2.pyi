from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ExperimentState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EXPERIMENT_STATE_UNSPECIFIED: _ClassVar[ExperimentState]
    EXPERIMENT_STATE_ACTIVE: _ClassVar[ExperimentState]
    EXPERIMENT_STATE_PAUSED: _ClassVar[ExperimentState]
    EXPERIMENT_STATE_STOPPING_COMPLETED: _ClassVar[ExperimentState]
    EXPERIMENT_STATE_STOPPING_CANCELED: _ClassVar[ExperimentState]
    EXPERIMENT_STATE_STOPPING_KILLED: _ClassVar[ExperimentState]
    EXPERIMENT_STATE_STOPPING_ERROR: _ClassVar[ExperimentState]
    EXPERIMENT_STATE_COMPLETED: _ClassVar[ExperimentState]
    EXPERIMENT_STATE_CANCELED: _ClassVar[ExperimentState]
    EXPERIMENT_STATE_ERROR: _ClassVar[ExperimentState]

class TrialState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRIAL_STATE_UNSPECIFIED: _ClassVar[TrialState]
    TRIAL_STATE_ACTIVE: _ClassVar[TrialState]
    TRIAL_STATE_PAUSED: _ClassVar[TrialState]
    TRIAL_STATE_STOPPING_COMPLETED: _ClassVar[TrialState]
    TRIAL_STATE_STOPPING_CANCELED: _ClassVar[TrialState]
    TRIAL_STATE_STOPPING_KILLED: _ClassVar[TrialState]
    TRIAL_STATE_STOPPING_ERROR: _ClassVar[TrialState]
    TRIAL_STATE_COMPLETED: _ClassVar[TrialState]
    TRIAL_STATE_CANCELED: _ClassVar[TrialState]
    TRIAL_STATE_ERROR: _ClassVar[TrialState]
EXPERIMENT_STATE_UNSPECIFIED: ExperimentState
EXPERIMENT_STATE_ACTIVE: ExperimentState
EXPERIMENT_STATE_PAUSED: ExperimentState
EXPERIMENT_STATE_STOPPING_COMPLETED: ExperimentState
EXPERIMENT_STATE_STOPPING_CANCELED: ExperimentState
EXPERIMENT_STATE_STOPPING_KILLED: ExperimentState
EXPERIMENT_STATE_STOPPING_ERROR: ExperimentState
EXPERIMENT_STATE_COMPLETED: ExperimentState
EXPERIMENT_STATE_CANCELED: ExperimentState
EXPERIMENT_STATE_ERROR: ExperimentState
TRIAL_STATE_UNSPECIFIED: TrialState
TRIAL_STATE_ACTIVE: TrialState
TRIAL_STATE_PAUSED: TrialState
TRIAL_STATE_STOPPING_COMPLETED: TrialState
TRIAL_STATE_STOPPING_CANCELED: TrialState
TRIAL_STATE_STOPPING_KILLED: TrialState
TRIAL_STATE_STOPPING_ERROR: TrialState
TRIAL_STATE_COMPLETED: TrialState
TRIAL_STATE_CANCELED: TrialState
TRIAL_STATE_ERROR: TrialState

class Envelope(_message.Message):
    __slots__ = ("event_id", "aggregate", "occurred_at_ns", "actor", "correlation_id", "causation_id", "experiment_created", "experiment_state_changed", "experiment_kill_requested", "experiment_progress_changed", "trial_created", "trial_ended", "trial_progress_reported", "trial_metrics_reported", "trial_kill_requested", "trial_stop_requested", "trial_length_set", "trial_validation_reported", "trial_status_reported", "trial_early_exit_reported", "trial_metadata_set", "checkpoint_reported", "agent_registered", "agent_lost", "agent_disabled", "agent_enabled", "job_resources_changed", "allocation_assigned", "allocation_started", "allocation_kill_requested", "allocation_exited", "allocation_requested", "allocation_stop_requested", "allocation_stop_acknowledged", "allocation_canceled", "allocation_resources_exited", "allocation_stop_withdrawn", "allocation_ready", "experiment_delete_requested", "experiment_deleted", "experiment_delete_failed", "checkpoint_gc_policy_changed", "checkpoint_delete_asked", "checkpoint_deletion_requested", "checkpoint_deleted", "checkpoint_partially_deleted", "tensorboard_files_deleted", "model_created", "model_version_registered", "user_created", "user_updated", "user_password_changed", "user_session_started", "user_session_revoked", "user_login_failed", "experiment_cancel_requested", "experiment_archive_set", "experiment_details_set", "experiment_continued", "slot_disabled", "slot_enabled", "unmanaged_trial_heartbeat", "unmanaged_trial_exited", "trial_reopened", "checkpoint_metadata_set", "trial_used_checkpoint")
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    AGGREGATE_FIELD_NUMBER: _ClassVar[int]
    OCCURRED_AT_NS_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    CORRELATION_ID_FIELD_NUMBER: _ClassVar[int]
    CAUSATION_ID_FIELD_NUMBER: _ClassVar[int]
    EXPERIMENT_CREATED_FIELD_NUMBER: _ClassVar[int]
    EXPERIMENT_STATE_CHANGED_FIELD_NUMBER: _ClassVar[int]
    EXPERIMENT_KILL_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    EXPERIMENT_PROGRESS_CHANGED_FIELD_NUMBER: _ClassVar[int]
    TRIAL_CREATED_FIELD_NUMBER: _ClassVar[int]
    TRIAL_ENDED_FIELD_NUMBER: _ClassVar[int]
    TRIAL_PROGRESS_REPORTED_FIELD_NUMBER: _ClassVar[int]
    TRIAL_METRICS_REPORTED_FIELD_NUMBER: _ClassVar[int]
    TRIAL_KILL_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    TRIAL_STOP_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    TRIAL_LENGTH_SET_FIELD_NUMBER: _ClassVar[int]
    TRIAL_VALIDATION_REPORTED_FIELD_NUMBER: _ClassVar[int]
    TRIAL_STATUS_REPORTED_FIELD_NUMBER: _ClassVar[int]
    TRIAL_EARLY_EXIT_REPORTED_FIELD_NUMBER: _ClassVar[int]
    TRIAL_METADATA_SET_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_REPORTED_FIELD_NUMBER: _ClassVar[int]
    AGENT_REGISTERED_FIELD_NUMBER: _ClassVar[int]
    AGENT_LOST_FIELD_NUMBER: _ClassVar[int]
    AGENT_DISABLED_FIELD_NUMBER: _ClassVar[int]
    AGENT_ENABLED_FIELD_NUMBER: _ClassVar[int]
    JOB_RESOURCES_CHANGED_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_ASSIGNED_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_STARTED_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_KILL_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_EXITED_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_STOP_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_STOP_ACKNOWLEDGED_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_CANCELED_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_RESOURCES_EXITED_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_STOP_WITHDRAWN_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_READY_FIELD_NUMBER: _ClassVar[int]
    EXPERIMENT_DELETE_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    EXPERIMENT_DELETED_FIELD_NUMBER: _ClassVar[int]
    EXPERIMENT_DELETE_FAILED_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_GC_POLICY_CHANGED_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_DELETE_ASKED_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_DELETION_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_DELETED_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_PARTIALLY_DELETED_FIELD_NUMBER: _ClassVar[int]
    TENSORBOARD_FILES_DELETED_FIELD_NUMBER: _ClassVar[int]
    MODEL_CREATED_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_REGISTERED_FIELD_NUMBER: _ClassVar[int]
    USER_CREATED_FIELD_NUMBER: _ClassVar[int]
    USER_UPDATED_FIELD_NUMBER: _ClassVar[int]
    USER_PASSWORD_CHANGED_FIELD_NUMBER: _ClassVar[int]
    USER_SESSION_STARTED_FIELD_NUMBER: _ClassVar[int]
    USER_SESSION_REVOKED_FIELD_NUMBER: _ClassVar[int]
    USER_LOGIN_FAILED_FIELD_NUMBER: _ClassVar[int]
    EXPERIMENT_CANCEL_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    EXPERIMENT_ARCHIVE_SET_FIELD_NUMBER: _ClassVar[int]
    EXPERIMENT_DETAILS_SET_FIELD_NUMBER: _ClassVar[int]
    EXPERIMENT_CONTINUED_FIELD_NUMBER: _ClassVar[int]
    SLOT_DISABLED_FIELD_NUMBER: _ClassVar[int]
    SLOT_ENABLED_FIELD_NUMBER: _ClassVar[int]
    UNMANAGED_TRIAL_HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    UNMANAGED_TRIAL_EXITED_FIELD_NUMBER: _ClassVar[int]
    TRIAL_REOPENED_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_METADATA_SET_FIELD_NUMBER: _ClassVar[int]
    TRIAL_USED_CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    event_id: str
    aggregate: str
    occurred_at_ns: int
    actor: str
    correlation_id: str
    causation_id: str
    experiment_created: ExperimentCreated
    experiment_state_changed: ExperimentStateChanged
    experiment_kill_requested: ExperimentKillRequested
    experiment_progress_changed: ExperimentProgressChanged
    trial_created: TrialCreated
    trial_ended: TrialEnded
    trial_progress_reported: TrialProgressReported
    trial_metrics_reported: TrialMetricsReported
    trial_kill_requested: TrialKillRequested
    trial_stop_requested: TrialStopRequested
    trial_length_set: TrialLengthSet
    trial_validation_reported: TrialValidationReported
    trial_status_reported: TrialStatusReported
    trial_early_exit_reported: TrialEarlyExitReported
    trial_metadata_set: TrialMetadataSet
    checkpoint_reported: CheckpointReported
    agent_registered: AgentRegistered
    agent_lost: AgentLost
    agent_disabled: AgentDisabled
    agent_enabled: AgentEnabled
    job_resources_changed: JobResourcesChanged
    allocation_assigned: AllocationAssigned
    allocation_started: AllocationStarted
    allocation_kill_requested: AllocationKillRequested
    allocation_exited: AllocationExited
    allocation_requested: AllocationRequested
    allocation_stop_requested: AllocationStopRequested
    allocation_stop_acknowledged: AllocationStopAcknowledged
    allocation_canceled: AllocationCanceled
    allocation_resources_exited: AllocationResourcesExited
    allocation_stop_withdrawn: AllocationStopWithdrawn
    allocation_ready: AllocationReady
    experiment_delete_requested: ExperimentDeleteRequested
    experiment_deleted: ExperimentDeleted
    experiment_delete_failed: ExperimentDeleteFailed
    checkpoint_gc_policy_changed: CheckpointGcPolicyChanged
    checkpoint_delete_asked: CheckpointDeleteAsked
    checkpoint_deletion_requested: CheckpointDeletionRequested
    checkpoint_deleted: CheckpointDeleted
    checkpoint_partially_deleted: CheckpointPartiallyDeleted
    tensorboard_files_deleted: TensorboardFilesDeleted
    model_created: ModelCreated
    model_version_registered: ModelVersionRegistered
    user_created: UserCreated
    user_updated: UserUpdated
    user_password_changed: UserPasswordChanged
    user_session_started: UserSessionStarted
    user_session_revoked: UserSessionRevoked
    user_login_failed: UserLoginFailed
    experiment_cancel_requested: ExperimentCancelRequested
    experiment_archive_set: ExperimentArchiveSet
    experiment_details_set: ExperimentDetailsSet
    experiment_continued: ExperimentContinued
    slot_disabled: SlotDisabled
    slot_enabled: SlotEnabled
    unmanaged_trial_heartbeat: UnmanagedTrialHeartbeat
    unmanaged_trial_exited: UnmanagedTrialExited
    trial_reopened: TrialReopened
    checkpoint_metadata_set: CheckpointMetadataSet
    trial_used_checkpoint: TrialUsedCheckpoint
    def __init__(self, event_id: _Optional[str] = ..., aggregate: _Optional[str] = ..., occurred_at_ns: _Optional[int] = ..., actor: _Optional[str] = ..., correlation_id: _Optional[str] = ..., causation_id: _Optional[str] = ..., experiment_created: _Optional[_Union[ExperimentCreated, _Mapping]] = ..., experiment_state_changed: _Optional[_Union[ExperimentStateChanged, _Mapping]] = ..., experiment_kill_requested: _Optional[_Union[ExperimentKillRequested, _Mapping]] = ..., experiment_progress_changed: _Optional[_Union[ExperimentProgressChanged, _Mapping]] = ..., trial_created: _Optional[_Union[TrialCreated, _Mapping]] = ..., trial_ended: _Optional[_Union[TrialEnded, _Mapping]] = ..., trial_progress_reported: _Optional[_Union[TrialProgressReported, _Mapping]] = ..., trial_metrics_reported: _Optional[_Union[TrialMetricsReported, _Mapping]] = ..., trial_kill_requested: _Optional[_Union[TrialKillRequested, _Mapping]] = ..., trial_stop_requested: _Optional[_Union[TrialStopRequested, _Mapping]] = ..., trial_length_set: _Optional[_Union[TrialLengthSet, _Mapping]] = ..., trial_validation_reported: _Optional[_Union[TrialValidationReported, _Mapping]] = ..., trial_status_reported: _Optional[_Union[TrialStatusReported, _Mapping]] = ..., trial_early_exit_reported: _Optional[_Union[TrialEarlyExitReported, _Mapping]] = ..., trial_metadata_set: _Optional[_Union[TrialMetadataSet, _Mapping]] = ..., checkpoint_reported: _Optional[_Union[CheckpointReported, _Mapping]] = ..., agent_registered: _Optional[_Union[AgentRegistered, _Mapping]] = ..., agent_lost: _Optional[_Union[AgentLost, _Mapping]] = ..., agent_disabled: _Optional[_Union[AgentDisabled, _Mapping]] = ..., agent_enabled: _Optional[_Union[AgentEnabled, _Mapping]] = ..., job_resources_changed: _Optional[_Union[JobResourcesChanged, _Mapping]] = ..., allocation_assigned: _Optional[_Union[AllocationAssigned, _Mapping]] = ..., allocation_started: _Optional[_Union[AllocationStarted, _Mapping]] = ..., allocation_kill_requested: _Optional[_Union[AllocationKillRequested, _Mapping]] = ..., allocation_exited: _Optional[_Union[AllocationExited, _Mapping]] = ..., allocation_requested: _Optional[_Union[AllocationRequested, _Mapping]] = ..., allocation_stop_requested: _Optional[_Union[AllocationStopRequested, _Mapping]] = ..., allocation_stop_acknowledged: _Optional[_Union[AllocationStopAcknowledged, _Mapping]] = ..., allocation_canceled: _Optional[_Union[AllocationCanceled, _Mapping]] = ..., allocation_resources_exited: _Optional[_Union[AllocationResourcesExited, _Mapping]] = ..., allocation_stop_withdrawn: _Optional[_Union[AllocationStopWithdrawn, _Mapping]] = ..., allocation_ready: _Optional[_Union[AllocationReady, _Mapping]] = ..., experiment_delete_requested: _Optional[_Union[ExperimentDeleteRequested, _Mapping]] = ..., experiment_deleted: _Optional[_Union[ExperimentDeleted, _Mapping]] = ..., experiment_delete_failed: _Optional[_Union[ExperimentDeleteFailed, _Mapping]] = ..., checkpoint_gc_policy_changed: _Optional[_Union[CheckpointGcPolicyChanged, _Mapping]] = ..., checkpoint_delete_asked: _Optional[_Union[CheckpointDeleteAsked, _Mapping]] = ..., checkpoint_deletion_requested: _Optional[_Union[CheckpointDeletionRequested, _Mapping]] = ..., checkpoint_deleted: _Optional[_Union[CheckpointDeleted, _Mapping]] = ..., checkpoint_partially_deleted: _Optional[_Union[CheckpointPartiallyDeleted, _Mapping]] = ..., tensorboard_files_deleted: _Optional[_Union[TensorboardFilesDeleted, _Mapping]] = ..., model_created: _Optional[_Union[ModelCreated, _Mapping]] = ..., model_version_registered: _Optional[_Union[ModelVersionRegistered, _Mapping]] = ..., user_created: _Optional[_Union[UserCreated, _Mapping]] = ..., user_updated: _Optional[_Union[UserUpdated, _Mapping]] = ..., user_password_changed: _Optional[_Union[UserPasswordChanged, _Mapping]] = ..., user_session_started: _Optional[_Union[UserSessionStarted, _Mapping]] = ..., user_session_revoked: _Optional[_Union[UserSessionRevoked, _Mapping]] = ..., user_login_failed: _Optional[_Union[UserLoginFailed, _Mapping]] = ..., experiment_cancel_requested: _Optional[_Union[ExperimentCancelRequested, _Mapping]] = ..., experiment_archive_set: _Optional[_Union[ExperimentArchiveSet, _Mapping]] = ..., experiment_details_set: _Optional[_Union[ExperimentDetailsSet, _Mapping]] = ..., experiment_continued: _Optional[_Union[ExperimentContinued, _Mapping]] = ..., slot_disabled: _Optional[_Union[SlotDisabled, _Mapping]] = ..., slot_enabled: _Optional[_Union[SlotEnabled, _Mapping]] = ..., unmanaged_trial_heartbeat: _Optional[_Union[UnmanagedTrialHeartbeat, _Mapping]] = ..., unmanaged_trial_exited: _Optional[_Union[UnmanagedTrialExited, _Mapping]] = ..., trial_reopened: _Optional[_Union[TrialReopened, _Mapping]] = ..., checkpoint_metadata_set: _Optional[_Union[CheckpointMetadataSet, _Mapping]] = ..., trial_used_checkpoint: _Optional[_Union[TrialUsedCheckpoint, _Mapping]] = ...) -> None: ...

class ExperimentCreated(_message.Message):
    __slots__ = ("experiment_id", "name", "owner", "config_json", "context_hash", "context_size", "activate", "parent_id", "unmanaged", "source_trial_checkpoint_uuid")
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    CONFIG_JSON_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_HASH_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_SIZE_FIELD_NUMBER: _ClassVar[int]
    ACTIVATE_FIELD_NUMBER: _ClassVar[int]
    PARENT_ID_FIELD_NUMBER: _ClassVar[int]
    UNMANAGED_FIELD_NUMBER: _ClassVar[int]
    SOURCE_TRIAL_CHECKPOINT_UUID_FIELD_NUMBER: _ClassVar[int]
    experiment_id: int
    name: str
    owner: str
    config_json: str
    context_hash: str
    context_size: int
    activate: bool
    parent_id: int
    unmanaged: bool
    source_trial_checkpoint_uuid: str
    def __init__(self, experiment_id: _Optional[int] = ..., name: _Optional[str] = ..., owner: _Optional[str] = ..., config_json: _Optional[str] = ..., context_hash: _Optional[str] = ..., context_size: _Optional[int] = ..., activate: _Optional[bool] = ..., parent_id: _Optional[int] = ..., unmanaged: _Optional[bool] = ..., source_trial_checkpoint_uuid: _Optional[str] = ...) -> None: ...

class ExperimentStateChanged(_message.Message):
    __slots__ = ("experiment_id", "state", "reason")
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    experiment_id: int
    state: ExperimentState
    reason: str
    def __init__(self, experiment_id: _Optional[int] = ..., state: _Optional[_Union[ExperimentState, str]] = ..., reason: _Optional[str] = ...) -> None: ...

class ExperimentKillRequested(_message.Message):
    __slots__ = ("experiment_id",)
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    experiment_id: int
    def __init__(self, experiment_id: _Optional[int] = ...) -> None: ...

class ExperimentCancelRequested(_message.Message):
    __slots__ = ("experiment_id",)
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    experiment_id: int
    def __init__(self, experiment_id: _Optional[int] = ...) -> None: ...

class ExperimentArchiveSet(_message.Message):
    __slots__ = ("experiment_id", "archived")
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    ARCHIVED_FIELD_NUMBER: _ClassVar[int]
    experiment_id: int
    archived: bool
    def __init__(self, experiment_id: _Optional[int] = ..., archived: _Optional[bool] = ...) -> None: ...

class ExperimentDetailsSet(_message.Message):
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
    labels: ExperimentLabels
    def __init__(self, experiment_id: _Optional[int] = ..., name: _Optional[str] = ..., description: _Optional[str] = ..., notes: _Optional[str] = ..., labels: _Optional[_Union[ExperimentLabels, _Mapping]] = ...) -> None: ...

class ExperimentLabels(_message.Message):
    __slots__ = ("labels",)
    LABELS_FIELD_NUMBER: _ClassVar[int]
    labels: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, labels: _Optional[_Iterable[str]] = ...) -> None: ...

class ExperimentContinued(_message.Message):
    __slots__ = ("experiment_id", "config_json")
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    CONFIG_JSON_FIELD_NUMBER: _ClassVar[int]
    experiment_id: int
    config_json: str
    def __init__(self, experiment_id: _Optional[int] = ..., config_json: _Optional[str] = ...) -> None: ...

class ExperimentProgressChanged(_message.Message):
    __slots__ = ("experiment_id", "progress")
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    experiment_id: int
    progress: float
    def __init__(self, experiment_id: _Optional[int] = ..., progress: _Optional[float] = ...) -> None: ...

class TrialCreated(_message.Message):
    __slots__ = ("trial_id", "experiment_id", "request_id", "hparams_json", "trial_seed", "length", "reason")
    TRIAL_ID_FIELD_NUMBER: _ClassVar[int]
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    HPARAMS_JSON_FIELD_NUMBER: _ClassVar[int]
    TRIAL_SEED_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    trial_id: int
    experiment_id: int
    request_id: str
    hparams_json: str
    trial_seed: int
    length: int
    reason: str
    def __init__(self, trial_id: _Optional[int] = ..., experiment_id: _Optional[int] = ..., request_id: _Optional[str] = ..., hparams_json: _Optional[str] = ..., trial_seed: _Optional[int] = ..., length: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class TrialEnded(_message.Message):
    __slots__ = ("trial_id", "experiment_id", "state", "reason")
    TRIAL_ID_FIELD_NUMBER: _ClassVar[int]
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    trial_id: int
    experiment_id: int
    state: TrialState
    reason: str
    def __init__(self, trial_id: _Optional[int] = ..., experiment_id: _Optional[int] = ..., state: _Optional[_Union[TrialState, str]] = ..., reason: _Optional[str] = ...) -> None: ...

class TrialReopened(_message.Message):
    __slots__ = ("trial_id", "experiment_id", "length", "reason")
    TRIAL_ID_FIELD_NUMBER: _ClassVar[int]
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    trial_id: int
    experiment_id: int
    length: int
    reason: str
    def __init__(self, trial_id: _Optional[int] = ..., experiment_id: _Optional[int] = ..., length: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class UnmanagedTrialHeartbeat(_message.Message):
    __slots__ = ("trial_id", "experiment_id", "timeout_s")
    TRIAL_ID_FIELD_NUMBER: _ClassVar[int]
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    trial_id: int
    experiment_id: int
    timeout_s: float
    def __init__(self, trial_id: _Optional[int] = ..., experiment_id: _Optional[int] = ..., timeout_s: _Optional[float] = ...) -> None: ...

class UnmanagedTrialExited(_message.Message):
    __slots__ = ("trial_id", "experiment_id", "state", "reason")
    TRIAL_ID_FIELD_NUMBER: _ClassVar[int]
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    trial_id: int
    experiment_id: int
    state: TrialState
    reason: str
    def __init__(self, trial_id: _Optional[int] = ..., experiment_id: _Optional[int] = ..., state: _Optional[_Union[TrialState, str]] = ..., reason: _Optional[str] = ...) -> None: ...

class TrialKillRequested(_message.Message):
    __slots__ = ("trial_id", "experiment_id")
    TRIAL_ID_FIELD_NUMBER: _ClassVar[int]
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    trial_id: int
    experiment_id: int
    def __init__(self, trial_id: _Optional[int] = ..., experiment_id: _Optional[int] = ...) -> None: ...

class TrialStopRequested(_message.Message):
    __slots__ = ("trial_id", "experiment_id", "reason", "rung")
    TRIAL_ID_FIELD_NUMBER: _ClassVar[int]
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RUNG_FIELD_NUMBER: _ClassVar[int]
    trial_id: int
    experiment_id: int
    reason: str
    rung: int
    def __init__(self, trial_id: _Optional[int] = ..., experiment_id: _Optional[int] = ..., reason: _Optional[str] = ..., rung: _Optional[int] = ...) -> None: ...

class TrialLengthSet(_message.Message):
    __slots__ = ("trial_id", "experiment_id", "rung", "length")
    TRIAL_ID_FIELD_NUMBER: _ClassVar[int]
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    RUNG_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    trial_id: int
    experiment_id: int
    rung: int
    length: int
    def __init__(self, trial_id: _Optional[int] = ..., experiment_id: _Optional[int] = ..., rung: _Optional[int] = ..., length: _Optional[int] = ...) -> None: ...

class TrialStatusReported(_message.Message):
    __slots__ = ("trial_id", "experiment_id", "status")
    TRIAL_ID_FIELD_NUMBER: _ClassVar[int]
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    trial_id: int
    experiment_id: int
    status: str
    def __init__(self, trial_id: _Optional[int] = ..., experiment_id: _Optional[int] = ..., status: _Optional[str] = ...) -> None: ...

class TrialEarlyExitReported(_message.Message):
    __slots__ = ("trial_id", "experiment_id", "reason")
    TRIAL_ID_FIELD_NUMBER: _ClassVar[int]
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    trial_id: int
    experiment_id: int
    reason: str
    def __init__(self, trial_id: _Optional[int] = ..., experiment_id: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class TrialMetadataSet(_message.Message):
    __slots__ = ("trial_id", "experiment_id", "metadata_json")
    TRIAL_ID_FIELD_NUMBER: _ClassVar[int]
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_JSON_FIELD_NUMBER: _ClassVar[int]
    trial_id: int
    experiment_id: int
    metadata_json: str
    def __init__(self, trial_id: _Optional[int] = ..., experiment_id: _Optional[int] = ..., metadata_json: _Optional[str] = ...) -> None: ...

class TrialValidationReported(_message.Message):
    __slots__ = ("trial_id", "experiment_id", "trial_run_id", "steps_completed", "metrics_json", "reported_at_ns")
    TRIAL_ID_FIELD_NUMBER: _ClassVar[int]
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    TRIAL_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STEPS_COMPLETED_FIELD_NUMBER: _ClassVar[int]
    METRICS_JSON_FIELD_NUMBER: _ClassVar[int]
    REPORTED_AT_NS_FIELD_NUMBER: _ClassVar[int]
    trial_id: int
    experiment_id: int
    trial_run_id: int
    steps_completed: int
    metrics_json: str
    reported_at_ns: int
    def __init__(self, trial_id: _Optional[int] = ..., experiment_id: _Optional[int] = ..., trial_run_id: _Optional[int] = ..., steps_completed: _Optional[int] = ..., metrics_json: _Optional[str] = ..., reported_at_ns: _Optional[int] = ...) -> None: ...

class TrialProgressReported(_message.Message):
    __slots__ = ("trial_id", "experiment_id", "progress")
    TRIAL_ID_FIELD_NUMBER: _ClassVar[int]
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    trial_id: int
    experiment_id: int
    progress: float
    def __init__(self, trial_id: _Optional[int] = ..., experiment_id: _Optional[int] = ..., progress: _Optional[float] = ...) -> None: ...

class MetricReport(_message.Message):
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

class TrialMetricsReported(_message.Message):
    __slots__ = ("trial_id", "experiment_id", "trial_run_id", "reports")
    TRIAL_ID_FIELD_NUMBER: _ClassVar[int]
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    TRIAL_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    REPORTS_FIELD_NUMBER: _ClassVar[int]
    trial_id: int
    experiment_id: int
    trial_run_id: int
    reports: _containers.RepeatedCompositeFieldContainer[MetricReport]
    def __init__(self, trial_id: _Optional[int] = ..., experiment_id: _Optional[int] = ..., trial_run_id: _Optional[int] = ..., reports: _Optional[_Iterable[_Union[MetricReport, _Mapping]]] = ...) -> None: ...

class CheckpointReported(_message.Message):
    __slots__ = ("uuid", "trial_id", "experiment_id", "allocation_id", "steps_completed", "metadata_json", "resources", "reported_at_ns")
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
    ALLOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    STEPS_COMPLETED_FIELD_NUMBER: _ClassVar[int]
    METADATA_JSON_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    REPORTED_AT_NS_FIELD_NUMBER: _ClassVar[int]
    uuid: str
    trial_id: int
    experiment_id: int
    allocation_id: str
    steps_completed: int
    metadata_json: str
    resources: _containers.ScalarMap[str, int]
    reported_at_ns: int
    def __init__(self, uuid: _Optional[str] = ..., trial_id: _Optional[int] = ..., experiment_id: _Optional[int] = ..., allocation_id: _Optional[str] = ..., steps_completed: _Optional[int] = ..., metadata_json: _Optional[str] = ..., resources: _Optional[_Mapping[str, int]] = ..., reported_at_ns: _Optional[int] = ...) -> None: ...

class Slot(_message.Message):
    __slots__ = ("slot_id", "type", "device", "gpu_uuid")
    SLOT_ID_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    GPU_UUID_FIELD_NUMBER: _ClassVar[int]
    slot_id: int
    type: str
    device: str
    gpu_uuid: str
    def __init__(self, slot_id: _Optional[int] = ..., type: _Optional[str] = ..., device: _Optional[str] = ..., gpu_uuid: _Optional[str] = ...) -> None: ...

class AgentRegistered(_message.Message):
    __slots__ = ("agent_id", "hostname", "slots", "resource_pool", "address", "runtime")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_POOL_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    hostname: str
    slots: _containers.RepeatedCompositeFieldContainer[Slot]
    resource_pool: str
    address: str
    runtime: str
    def __init__(self, agent_id: _Optional[str] = ..., hostname: _Optional[str] = ..., slots: _Optional[_Iterable[_Union[Slot, _Mapping]]] = ..., resource_pool: _Optional[str] = ..., address: _Optional[str] = ..., runtime: _Optional[str] = ...) -> None: ...

class AgentLost(_message.Message):
    __slots__ = ("agent_id", "registration_event_id", "last_heartbeat_ns", "reason")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    REGISTRATION_EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_NS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    registration_event_id: str
    last_heartbeat_ns: int
    reason: str
    def __init__(self, agent_id: _Optional[str] = ..., registration_event_id: _Optional[str] = ..., last_heartbeat_ns: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class SlotDisabled(_message.Message):
    __slots__ = ("agent_id", "slot_id", "drain")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    SLOT_ID_FIELD_NUMBER: _ClassVar[int]
    DRAIN_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    slot_id: int
    drain: bool
    def __init__(self, agent_id: _Optional[str] = ..., slot_id: _Optional[int] = ..., drain: _Optional[bool] = ...) -> None: ...

class SlotEnabled(_message.Message):
    __slots__ = ("agent_id", "slot_id")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    SLOT_ID_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    slot_id: int
    def __init__(self, agent_id: _Optional[str] = ..., slot_id: _Optional[int] = ...) -> None: ...

class AgentDisabled(_message.Message):
    __slots__ = ("agent_id", "drain", "owner")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    DRAIN_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    drain: bool
    owner: str
    def __init__(self, agent_id: _Optional[str] = ..., drain: _Optional[bool] = ..., owner: _Optional[str] = ...) -> None: ...

class AgentEnabled(_message.Message):
    __slots__ = ("agent_id", "owner")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    owner: str
    def __init__(self, agent_id: _Optional[str] = ..., owner: _Optional[str] = ...) -> None: ...

class JobResourcesChanged(_message.Message):
    __slots__ = ("job_id", "priority", "weight", "max_slots", "owner")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    MAX_SLOTS_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    priority: int
    weight: float
    max_slots: int
    owner: str
    def __init__(self, job_id: _Optional[str] = ..., priority: _Optional[int] = ..., weight: _Optional[float] = ..., max_slots: _Optional[int] = ..., owner: _Optional[str] = ...) -> None: ...

class TrialLaunch(_message.Message):
    __slots__ = ("experiment_id", "trial_id", "trial_run_id", "config_json", "hparams_json", "context_hash", "trial_seed", "latest_checkpoint", "steps_completed", "owner", "searcher_length")
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    TRIAL_ID_FIELD_NUMBER: _ClassVar[int]
    TRIAL_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    CONFIG_JSON_FIELD_NUMBER: _ClassVar[int]
    HPARAMS_JSON_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_HASH_FIELD_NUMBER: _ClassVar[int]
    TRIAL_SEED_FIELD_NUMBER: _ClassVar[int]
    LATEST_CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    STEPS_COMPLETED_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    SEARCHER_LENGTH_FIELD_NUMBER: _ClassVar[int]
    experiment_id: int
    trial_id: int
    trial_run_id: int
    config_json: str
    hparams_json: str
    context_hash: str
    trial_seed: int
    latest_checkpoint: str
    steps_completed: int
    owner: str
    searcher_length: int
    def __init__(self, experiment_id: _Optional[int] = ..., trial_id: _Optional[int] = ..., trial_run_id: _Optional[int] = ..., config_json: _Optional[str] = ..., hparams_json: _Optional[str] = ..., context_hash: _Optional[str] = ..., trial_seed: _Optional[int] = ..., latest_checkpoint: _Optional[str] = ..., steps_completed: _Optional[int] = ..., owner: _Optional[str] = ..., searcher_length: _Optional[int] = ...) -> None: ...

class AllocationRequested(_message.Message):
    __slots__ = ("allocation_id", "task_id", "task_type", "slots", "resource_pool", "job_id", "weight", "priority", "max_slots", "preemptible", "owner", "reason", "trial", "task")
    ALLOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_TYPE_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_POOL_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    MAX_SLOTS_FIELD_NUMBER: _ClassVar[int]
    PREEMPTIBLE_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    TRIAL_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    allocation_id: str
    task_id: str
    task_type: str
    slots: int
    resource_pool: str
    job_id: str
    weight: float
    priority: int
    max_slots: int
    preemptible: bool
    owner: str
    reason: str
    trial: TrialLaunch
    task: TaskLaunch
    def __init__(self, allocation_id: _Optional[str] = ..., task_id: _Optional[str] = ..., task_type: _Optional[str] = ..., slots: _Optional[int] = ..., resource_pool: _Optional[str] = ..., job_id: _Optional[str] = ..., weight: _Optional[float] = ..., priority: _Optional[int] = ..., max_slots: _Optional[int] = ..., preemptible: _Optional[bool] = ..., owner: _Optional[str] = ..., reason: _Optional[str] = ..., trial: _Optional[_Union[TrialLaunch, _Mapping]] = ..., task: _Optional[_Union[TaskLaunch, _Mapping]] = ...) -> None: ...

class TaskLaunch(_message.Message):
    __slots__ = ("description", "config_json", "context_hash", "command", "tensorboard_sources", "shell_public_key")
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    CONFIG_JSON_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_HASH_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    TENSORBOARD_SOURCES_FIELD_NUMBER: _ClassVar[int]
    SHELL_PUBLIC_KEY_FIELD_NUMBER: _ClassVar[int]
    description: str
    config_json: str
    context_hash: str
    command: _containers.RepeatedScalarFieldContainer[str]
    tensorboard_sources: _containers.RepeatedCompositeFieldContainer[TensorboardSource]
    shell_public_key: str
    def __init__(self, description: _Optional[str] = ..., config_json: _Optional[str] = ..., context_hash: _Optional[str] = ..., command: _Optional[_Iterable[str]] = ..., tensorboard_sources: _Optional[_Iterable[_Union[TensorboardSource, _Mapping]]] = ..., shell_public_key: _Optional[str] = ...) -> None: ...

class TensorboardSource(_message.Message):
    __slots__ = ("experiment_id", "trial_id", "storage_json")
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    TRIAL_ID_FIELD_NUMBER: _ClassVar[int]
    STORAGE_JSON_FIELD_NUMBER: _ClassVar[int]
    experiment_id: int
    trial_id: int
    storage_json: str
    def __init__(self, experiment_id: _Optional[int] = ..., trial_id: _Optional[int] = ..., storage_json: _Optional[str] = ...) -> None: ...

class Placement(_message.Message):
    __slots__ = ("agent_id", "slot_ids", "address")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    SLOT_IDS_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    slot_ids: _containers.RepeatedScalarFieldContainer[int]
    address: str
    def __init__(self, agent_id: _Optional[str] = ..., slot_ids: _Optional[_Iterable[int]] = ..., address: _Optional[str] = ...) -> None: ...

class AllocationAssigned(_message.Message):
    __slots__ = ("allocation_id", "trial_id", "experiment_id", "agent_id", "slot_ids", "trial_run_id", "config_json", "hparams_json", "context_hash", "trial_seed", "latest_checkpoint", "steps_completed", "owner", "task_id", "placements", "reason")
    ALLOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    TRIAL_ID_FIELD_NUMBER: _ClassVar[int]
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    SLOT_IDS_FIELD_NUMBER: _ClassVar[int]
    TRIAL_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    CONFIG_JSON_FIELD_NUMBER: _ClassVar[int]
    HPARAMS_JSON_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_HASH_FIELD_NUMBER: _ClassVar[int]
    TRIAL_SEED_FIELD_NUMBER: _ClassVar[int]
    LATEST_CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    STEPS_COMPLETED_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    PLACEMENTS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    allocation_id: str
    trial_id: int
    experiment_id: int
    agent_id: str
    slot_ids: _containers.RepeatedScalarFieldContainer[int]
    trial_run_id: int
    config_json: str
    hparams_json: str
    context_hash: str
    trial_seed: int
    latest_checkpoint: str
    steps_completed: int
    owner: str
    task_id: str
    placements: _containers.RepeatedCompositeFieldContainer[Placement]
    reason: str
    def __init__(self, allocation_id: _Optional[str] = ..., trial_id: _Optional[int] = ..., experiment_id: _Optional[int] = ..., agent_id: _Optional[str] = ..., slot_ids: _Optional[_Iterable[int]] = ..., trial_run_id: _Optional[int] = ..., config_json: _Optional[str] = ..., hparams_json: _Optional[str] = ..., context_hash: _Optional[str] = ..., trial_seed: _Optional[int] = ..., latest_checkpoint: _Optional[str] = ..., steps_completed: _Optional[int] = ..., owner: _Optional[str] = ..., task_id: _Optional[str] = ..., placements: _Optional[_Iterable[_Union[Placement, _Mapping]]] = ..., reason: _Optional[str] = ...) -> None: ...

class AllocationStarted(_message.Message):
    __slots__ = ("allocation_id", "trial_id", "agent_id", "pid")
    ALLOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    TRIAL_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    allocation_id: str
    trial_id: int
    agent_id: str
    pid: int
    def __init__(self, allocation_id: _Optional[str] = ..., trial_id: _Optional[int] = ..., agent_id: _Optional[str] = ..., pid: _Optional[int] = ...) -> None: ...

class AllocationReady(_message.Message):
    __slots__ = ("allocation_id", "task_id", "agent_id", "proxy_address")
    ALLOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    PROXY_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    allocation_id: str
    task_id: str
    agent_id: str
    proxy_address: str
    def __init__(self, allocation_id: _Optional[str] = ..., task_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., proxy_address: _Optional[str] = ...) -> None: ...

class AllocationKillRequested(_message.Message):
    __slots__ = ("allocation_id", "trial_id", "agent_id", "reason", "task_id")
    ALLOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    TRIAL_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    allocation_id: str
    trial_id: int
    agent_id: str
    reason: str
    task_id: str
    def __init__(self, allocation_id: _Optional[str] = ..., trial_id: _Optional[int] = ..., agent_id: _Optional[str] = ..., reason: _Optional[str] = ..., task_id: _Optional[str] = ...) -> None: ...

class AllocationStopRequested(_message.Message):
    __slots__ = ("allocation_id", "task_id", "reason")
    ALLOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    allocation_id: str
    task_id: str
    reason: str
    def __init__(self, allocation_id: _Optional[str] = ..., task_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class AllocationStopWithdrawn(_message.Message):
    __slots__ = ("allocation_id", "task_id", "reason", "stop_event_id")
    ALLOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    STOP_EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    allocation_id: str
    task_id: str
    reason: str
    stop_event_id: str
    def __init__(self, allocation_id: _Optional[str] = ..., task_id: _Optional[str] = ..., reason: _Optional[str] = ..., stop_event_id: _Optional[str] = ...) -> None: ...

class AllocationStopAcknowledged(_message.Message):
    __slots__ = ("allocation_id", "task_id")
    ALLOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    allocation_id: str
    task_id: str
    def __init__(self, allocation_id: _Optional[str] = ..., task_id: _Optional[str] = ...) -> None: ...

class AllocationCanceled(_message.Message):
    __slots__ = ("allocation_id", "task_id", "reason")
    ALLOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    allocation_id: str
    task_id: str
    reason: str
    def __init__(self, allocation_id: _Optional[str] = ..., task_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class AllocationExited(_message.Message):
    __slots__ = ("allocation_id", "trial_id", "experiment_id", "agent_id", "exit_code", "killed", "error", "task_id", "agent_lost", "fatal")
    ALLOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    TRIAL_ID_FIELD_NUMBER: _ClassVar[int]
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    KILLED_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_LOST_FIELD_NUMBER: _ClassVar[int]
    FATAL_FIELD_NUMBER: _ClassVar[int]
    allocation_id: str
    trial_id: int
    experiment_id: int
    agent_id: str
    exit_code: int
    killed: bool
    error: str
    task_id: str
    agent_lost: bool
    fatal: bool
    def __init__(self, allocation_id: _Optional[str] = ..., trial_id: _Optional[int] = ..., experiment_id: _Optional[int] = ..., agent_id: _Optional[str] = ..., exit_code: _Optional[int] = ..., killed: _Optional[bool] = ..., error: _Optional[str] = ..., task_id: _Optional[str] = ..., agent_lost: _Optional[bool] = ..., fatal: _Optional[bool] = ...) -> None: ...

class AllocationResourcesExited(_message.Message):
    __slots__ = ("allocation_id", "task_id", "agent_id", "exit_code", "killed", "error", "trial_id", "experiment_id", "fatal")
    ALLOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    KILLED_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    TRIAL_ID_FIELD_NUMBER: _ClassVar[int]
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    FATAL_FIELD_NUMBER: _ClassVar[int]
    allocation_id: str
    task_id: str
    agent_id: str
    exit_code: int
    killed: bool
    error: str
    trial_id: int
    experiment_id: int
    fatal: bool
    def __init__(self, allocation_id: _Optional[str] = ..., task_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., exit_code: _Optional[int] = ..., killed: _Optional[bool] = ..., error: _Optional[str] = ..., trial_id: _Optional[int] = ..., experiment_id: _Optional[int] = ..., fatal: _Optional[bool] = ...) -> None: ...

class LogLine(_message.Message):
    __slots__ = ("timestamp_ns", "stdtype", "log", "rank")
    TIMESTAMP_NS_FIELD_NUMBER: _ClassVar[int]
    STDTYPE_FIELD_NUMBER: _ClassVar[int]
    LOG_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    timestamp_ns: int
    stdtype: str
    log: str
    rank: int
    def __init__(self, timestamp_ns: _Optional[int] = ..., stdtype: _Optional[str] = ..., log: _Optional[str] = ..., rank: _Optional[int] = ...) -> None: ...

class LogBatch(_message.Message):
    __slots__ = ("trial_id", "allocation_id", "agent_id", "lines", "allocation_ended")
    TRIAL_ID_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    LINES_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_ENDED_FIELD_NUMBER: _ClassVar[int]
    trial_id: int
    allocation_id: str
    agent_id: str
    lines: _containers.RepeatedCompositeFieldContainer[LogLine]
    allocation_ended: bool
    def __init__(self, trial_id: _Optional[int] = ..., allocation_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., lines: _Optional[_Iterable[_Union[LogLine, _Mapping]]] = ..., allocation_ended: _Optional[bool] = ...) -> None: ...

class CheckpointGcPolicyChanged(_message.Message):
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

class CheckpointDeleteAsked(_message.Message):
    __slots__ = ("experiment_id", "uuids", "globs", "asked_by")
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    UUIDS_FIELD_NUMBER: _ClassVar[int]
    GLOBS_FIELD_NUMBER: _ClassVar[int]
    ASKED_BY_FIELD_NUMBER: _ClassVar[int]
    experiment_id: int
    uuids: _containers.RepeatedScalarFieldContainer[str]
    globs: _containers.RepeatedScalarFieldContainer[str]
    asked_by: str
    def __init__(self, experiment_id: _Optional[int] = ..., uuids: _Optional[_Iterable[str]] = ..., globs: _Optional[_Iterable[str]] = ..., asked_by: _Optional[str] = ...) -> None: ...

class ExperimentDeleteRequested(_message.Message):
    __slots__ = ("experiment_id",)
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    experiment_id: int
    def __init__(self, experiment_id: _Optional[int] = ...) -> None: ...

class ExperimentDeleted(_message.Message):
    __slots__ = ("experiment_id",)
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    experiment_id: int
    def __init__(self, experiment_id: _Optional[int] = ...) -> None: ...

class ExperimentDeleteFailed(_message.Message):
    __slots__ = ("experiment_id", "reason")
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    experiment_id: int
    reason: str
    def __init__(self, experiment_id: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class CheckpointDeletionRequested(_message.Message):
    __slots__ = ("experiment_id", "deletion_id", "uuids", "globs", "reason", "storage_json", "bytes")
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    DELETION_ID_FIELD_NUMBER: _ClassVar[int]
    UUIDS_FIELD_NUMBER: _ClassVar[int]
    GLOBS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    STORAGE_JSON_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    experiment_id: int
    deletion_id: int
    uuids: _containers.RepeatedScalarFieldContainer[str]
    globs: _containers.RepeatedScalarFieldContainer[str]
    reason: str
    storage_json: str
    bytes: int
    def __init__(self, experiment_id: _Optional[int] = ..., deletion_id: _Optional[int] = ..., uuids: _Optional[_Iterable[str]] = ..., globs: _Optional[_Iterable[str]] = ..., reason: _Optional[str] = ..., storage_json: _Optional[str] = ..., bytes: _Optional[int] = ...) -> None: ...

class CheckpointDeleted(_message.Message):
    __slots__ = ("uuid", "experiment_id", "trial_id", "deletion_id", "bytes_freed")
    UUID_FIELD_NUMBER: _ClassVar[int]
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    TRIAL_ID_FIELD_NUMBER: _ClassVar[int]
    DELETION_ID_FIELD_NUMBER: _ClassVar[int]
    BYTES_FREED_FIELD_NUMBER: _ClassVar[int]
    uuid: str
    experiment_id: int
    trial_id: int
    deletion_id: int
    bytes_freed: int
    def __init__(self, uuid: _Optional[str] = ..., experiment_id: _Optional[int] = ..., trial_id: _Optional[int] = ..., deletion_id: _Optional[int] = ..., bytes_freed: _Optional[int] = ...) -> None: ...

class CheckpointPartiallyDeleted(_message.Message):
    __slots__ = ("uuid", "experiment_id", "trial_id", "deletion_id", "remaining", "error", "bytes_freed")
    class RemainingEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    UUID_FIELD_NUMBER: _ClassVar[int]
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    TRIAL_ID_FIELD_NUMBER: _ClassVar[int]
    DELETION_ID_FIELD_NUMBER: _ClassVar[int]
    REMAINING_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    BYTES_FREED_FIELD_NUMBER: _ClassVar[int]
    uuid: str
    experiment_id: int
    trial_id: int
    deletion_id: int
    remaining: _containers.ScalarMap[str, int]
    error: str
    bytes_freed: int
    def __init__(self, uuid: _Optional[str] = ..., experiment_id: _Optional[int] = ..., trial_id: _Optional[int] = ..., deletion_id: _Optional[int] = ..., remaining: _Optional[_Mapping[str, int]] = ..., error: _Optional[str] = ..., bytes_freed: _Optional[int] = ...) -> None: ...

class TensorboardFilesDeleted(_message.Message):
    __slots__ = ("experiment_id", "delete_request", "remaining", "error", "bytes_freed")
    class RemainingEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    DELETE_REQUEST_FIELD_NUMBER: _ClassVar[int]
    REMAINING_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    BYTES_FREED_FIELD_NUMBER: _ClassVar[int]
    experiment_id: int
    delete_request: int
    remaining: _containers.ScalarMap[str, int]
    error: str
    bytes_freed: int
    def __init__(self, experiment_id: _Optional[int] = ..., delete_request: _Optional[int] = ..., remaining: _Optional[_Mapping[str, int]] = ..., error: _Optional[str] = ..., bytes_freed: _Optional[int] = ...) -> None: ...

class CheckpointMetadataSet(_message.Message):
    __slots__ = ("uuid", "experiment_id", "trial_id", "metadata_json")
    UUID_FIELD_NUMBER: _ClassVar[int]
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    TRIAL_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_JSON_FIELD_NUMBER: _ClassVar[int]
    uuid: str
    experiment_id: int
    trial_id: int
    metadata_json: str
    def __init__(self, uuid: _Optional[str] = ..., experiment_id: _Optional[int] = ..., trial_id: _Optional[int] = ..., metadata_json: _Optional[str] = ...) -> None: ...

class TrialUsedCheckpoint(_message.Message):
    __slots__ = ("trial_id", "experiment_id", "checkpoint_uuid")
    TRIAL_ID_FIELD_NUMBER: _ClassVar[int]
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_UUID_FIELD_NUMBER: _ClassVar[int]
    trial_id: int
    experiment_id: int
    checkpoint_uuid: str
    def __init__(self, trial_id: _Optional[int] = ..., experiment_id: _Optional[int] = ..., checkpoint_uuid: _Optional[str] = ...) -> None: ...

class ModelCreated(_message.Message):
    __slots__ = ("model_id", "name", "description", "metadata_json", "labels", "owner")
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    METADATA_JSON_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    model_id: int
    name: str
    description: str
    metadata_json: str
    labels: _containers.RepeatedScalarFieldContainer[str]
    owner: str
    def __init__(self, model_id: _Optional[int] = ..., name: _Optional[str] = ..., description: _Optional[str] = ..., metadata_json: _Optional[str] = ..., labels: _Optional[_Iterable[str]] = ..., owner: _Optional[str] = ...) -> None: ...

class ModelVersionRegistered(_message.Message):
    __slots__ = ("model_name", "model_id", "version", "checkpoint_uuid", "experiment_id", "trial_id", "name", "comment", "owner")
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_UUID_FIELD_NUMBER: _ClassVar[int]
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    TRIAL_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    COMMENT_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    model_name: str
    model_id: int
    version: int
    checkpoint_uuid: str
    experiment_id: int
    trial_id: int
    name: str
    comment: str
    owner: str
    def __init__(self, model_name: _Optional[str] = ..., model_id: _Optional[int] = ..., version: _Optional[int] = ..., checkpoint_uuid: _Optional[str] = ..., experiment_id: _Optional[int] = ..., trial_id: _Optional[int] = ..., name: _Optional[str] = ..., comment: _Optional[str] = ..., owner: _Optional[str] = ...) -> None: ...

class UserCreated(_message.Message):
    __slots__ = ("user_id", "username", "display_name", "admin", "active", "password_hash", "created_by")
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    USERNAME_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
    ADMIN_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_FIELD_NUMBER: _ClassVar[int]
    PASSWORD_HASH_FIELD_NUMBER: _ClassVar[int]
    CREATED_BY_FIELD_NUMBER: _ClassVar[int]
    user_id: int
    username: str
    display_name: str
    admin: bool
    active: bool
    password_hash: str
    created_by: str
    def __init__(self, user_id: _Optional[int] = ..., username: _Optional[str] = ..., display_name: _Optional[str] = ..., admin: _Optional[bool] = ..., active: _Optional[bool] = ..., password_hash: _Optional[str] = ..., created_by: _Optional[str] = ...) -> None: ...

class UserUpdated(_message.Message):
    __slots__ = ("user_id", "username", "display_name", "admin", "active")
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    USERNAME_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
    ADMIN_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_FIELD_NUMBER: _ClassVar[int]
    user_id: int
    username: str
    display_name: str
    admin: bool
    active: bool
    def __init__(self, user_id: _Optional[int] = ..., username: _Optional[str] = ..., display_name: _Optional[str] = ..., admin: _Optional[bool] = ..., active: _Optional[bool] = ...) -> None: ...

class UserPasswordChanged(_message.Message):
    __slots__ = ("user_id", "password_hash")
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    PASSWORD_HASH_FIELD_NUMBER: _ClassVar[int]
    user_id: int
    password_hash: str
    def __init__(self, user_id: _Optional[int] = ..., password_hash: _Optional[str] = ...) -> None: ...

class UserSessionStarted(_message.Message):
    __slots__ = ("user_id", "session_id", "expires_at_ns")
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_NS_FIELD_NUMBER: _ClassVar[int]
    user_id: int
    session_id: str
    expires_at_ns: int
    def __init__(self, user_id: _Optional[int] = ..., session_id: _Optional[str] = ..., expires_at_ns: _Optional[int] = ...) -> None: ...

class UserSessionRevoked(_message.Message):
    __slots__ = ("user_id", "session_id")
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    user_id: int
    session_id: str
    def __init__(self, user_id: _Optional[int] = ..., session_id: _Optional[str] = ...) -> None: ...

class UserLoginFailed(_message.Message):
    __slots__ = ("user_id", "username", "address", "reason")
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    USERNAME_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    user_id: int
    username: str
    address: str
    reason: str
    def __init__(self, user_id: _Optional[int] = ..., username: _Optional[str] = ..., address: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...
