"""The API's messages as Determined's REST API shows them: lowerCamelCase
field names, states with their `STATE_` prefix, times as RFC 3339 strings
(null when not yet), configs, hyperparameters and metrics as JSON objects
(not strings). A few fields of our own that Determined lacks (`endReason`,
`waitingReason`, the trial's `runs`) say why things are as they are.
"""

import datetime
import json
from typing import Any

from determined.proto import api_pb2, events_pb2

JSON = dict[str, Any]


def time(ns: int) -> str | None:
    """An event time (ns since the epoch) as RFC 3339 UTC; None for 0 (not yet)."""
    if not ns:
        return None
    return datetime.datetime.fromtimestamp(ns / 1e9, datetime.UTC).isoformat().replace("+00:00", "Z")


def state(name: str) -> str:
    return f"STATE_{name}" if name else "STATE_UNSPECIFIED"


def experiment(message: api_pb2.Experiment) -> JSON:
    return {
        "id": message.id,
        "name": message.name,
        "description": message.description,
        "labels": list(message.labels),
        "state": state(message.state),
        "progress": message.progress,
        "startTime": time(message.started_at_ns),
        "endTime": time(message.ended_at_ns),
        "username": message.owner,
        "resourcePool": message.resource_pool,
        "searcherType": message.searcher_name,
        "searcherMetric": message.searcher_metric,
        "bestTrialSearcherMetric": (
            message.best_trial_searcher_metric if message.HasField("best_trial_searcher_metric") else None
        ),
        "numTrials": message.num_trials,
        "archived": False,
        "jobId": f"experiment/{message.id}",
        "endReason": message.end_reason,
    }


def metrics_workload(point: api_pb2.MetricPoint) -> JSON:
    """A reported point as Determined's MetricsWorkload."""
    return {
        "group": point.group,
        "totalBatches": point.steps_completed,
        "endTime": time(point.reported_at_ns),
        "metrics": {"avgMetrics": json.loads(point.metrics_json)},
    }


def trial(message: api_pb2.Trial) -> JSON:
    shown: JSON = {
        "id": message.id,
        "experimentId": message.experiment_id,
        "state": state(message.state),
        "hparams": json.loads(message.hparams_json or "{}"),
        "startTime": time(message.started_at_ns),
        "endTime": time(message.ended_at_ns),
        "progress": message.progress,
        "restarts": message.restarts,
        "totalBatchesProcessed": message.total_batches,
        "totalCheckpoints": message.num_checkpoints,
        "runnerState": message.status,
        "searcherLength": message.searcher_length,
        "rung": message.rung,
        "seed": message.trial_seed,
        "endReason": message.end_reason,
        "searcherMetricValue": (
            message.searcher_metric_value if message.HasField("searcher_metric_value") else None
        ),
        "latestTraining": None,
        "latestValidation": None,
        "latestCheckpoint": None,
    }
    if message.HasField("latest_training"):
        shown["latestTraining"] = metrics_workload(message.latest_training)
    if message.HasField("latest_validation"):
        shown["latestValidation"] = metrics_workload(message.latest_validation)
    if message.HasField("latest_checkpoint"):
        shown["latestCheckpoint"] = checkpoint(message.latest_checkpoint)
    return shown


def trial_run(run: api_pb2.TrialRun) -> JSON:
    return {
        "allocationId": run.allocation_id,
        "trialRunId": run.trial_run_id,
        "agentIds": list(run.agent_ids),
        "state": state(run.state),
        "exitCode": run.exit_code,
        "reason": run.reason,
        "requestedTime": time(run.requested_at_ns),
        "assignedTime": time(run.assigned_at_ns),
        "exitedTime": time(run.exited_at_ns),
    }


def checkpoint(message: api_pb2.Checkpoint) -> JSON:
    metadata = json.loads(message.metadata_json or "{}")
    metadata.setdefault("steps_completed", message.steps_completed)
    validation = json.loads(message.validation_metrics_json) if message.validation_metrics_json else None
    return {
        "uuid": message.uuid,
        "reportTime": time(message.reported_at_ns),
        "state": state(message.state),
        "resources": dict(message.resources),
        "sizeBytes": sum(message.resources.values()),
        "metadata": metadata,
        "training": {
            "trialId": message.trial_id,
            "experimentId": message.experiment_id,
            "validationMetrics": {"avgMetrics": validation} if validation is not None else None,
            "searcherMetric": message.searcher_metric if message.HasField("searcher_metric") else None,
        },
        "storage": json.loads(message.storage_json) if message.storage_json else None,
        "modelVersions": list(message.model_versions),
        "deleteError": message.delete_error,
    }


def agent(message: api_pb2.Agent) -> JSON:
    uses = {use.slot_id: use for use in message.slot_uses}
    slots: JSON = {}
    for slot in message.slots:
        use = uses.get(slot.slot_id)
        running = use is not None and bool(use.allocation_id)
        slots[str(slot.slot_id)] = {
            "id": str(slot.slot_id),
            "device": {"id": slot.slot_id, "brand": slot.device, "type": f"TYPE_{slot.type.upper()}"},
            "enabled": message.state == "ENABLED",
            "draining": message.state == "DRAINING",
            "container": {"id": use.allocation_id, "state": "STATE_RUNNING"}
            if use is not None and running
            else None,
            "trialId": use.trial_id if use is not None and running else None,
            "experimentId": use.experiment_id if use is not None and running else None,
        }
    return {
        "id": message.agent_id,
        "hostname": message.hostname,
        "registeredTime": time(message.registered_at_ns),
        "resourcePools": [message.resource_pool],
        "addresses": [message.address],
        "state": state(message.state),
        "enabled": message.state == "ENABLED",
        "draining": message.state == "DRAINING",
        "slots": slots,
    }


def job(message: api_pb2.Job) -> JSON:
    return {
        "jobId": message.job_id,
        "type": f"TYPE_{message.type}",
        "name": message.name,
        "entityId": str(message.experiment_id or message.job_id),
        "username": message.owner,
        "resourcePool": message.resource_pool,
        "priority": message.priority,
        "weight": message.weight,
        "maxSlots": message.max_slots,
        "submissionTime": time(message.submitted_at_ns),
        "requestedSlots": message.slots_needed,
        "allocatedSlots": message.slots_acquired,
        "summary": {"state": state(message.state), "jobsAhead": max(message.position - 1, 0)},
        "waitingReason": message.waiting_reason,
    }


def log_line(response: api_pb2.TrialLogsResponse, line: events_pb2.LogLine) -> JSON:
    """One line of a TrialLogs response as Determined's TrialLogsResponse."""
    return {
        "trialId": response.trial_id,
        "agentId": response.agent_id,
        "allocationId": response.allocation_id,
        "timestamp": time(line.timestamp_ns),
        "stdtype": line.stdtype,
        "rankId": line.rank if line.HasField("rank") else None,
        "message": line.log,
    }


def task(message: api_pb2.Task) -> JSON:
    """A notebook, TensorBoard, command or shell, as Determined's Command (and
    ours: taskType, exitReason, ready, the config)."""
    return {
        "id": message.id,
        "taskType": message.task_type,
        "description": message.description,
        "owner": message.owner,
        "username": message.owner,
        "state": state(message.state),
        "allocationId": message.allocation_id,
        "resourcePool": message.resource_pool,
        "slots": message.slots,
        "priority": message.priority,
        "agentId": message.agent_id,
        "startTime": time(message.start_time_ns),
        "endTime": time(message.end_time_ns),
        "exitCode": message.exit_code if message.HasField("exit_code") else None,
        "exitReason": message.exit_reason,
        "ready": message.ready,
        "jobId": message.job_id,
        "experimentIds": list(message.experiment_ids),
        "trialIds": list(message.trial_ids),
        "command": list(message.command),
        "config": json.loads(message.config_json or "{}"),
    }


def task_log_line(response: api_pb2.TaskLogsResponse, line: events_pb2.LogLine) -> JSON:
    """One line of a TaskLogs response as Determined's TaskLogsResponse."""
    return {
        "taskId": response.task_id,
        "agentId": response.agent_id,
        "allocationId": response.allocation_id,
        "timestamp": time(line.timestamp_ns),
        "stdtype": line.stdtype,
        "message": line.log,
    }


def user(message: api_pb2.User) -> JSON:
    return {
        "id": message.id,
        "username": message.username,
        "displayName": message.display_name,
        "admin": message.admin,
        "active": message.active,
        "remote": False,
        "createdAt": time(message.created_at_ns),
    }


def pagination(offset: int, limit: int, shown: int, total: int) -> JSON:
    return {
        "offset": offset,
        "limit": limit,
        "startIndex": offset,
        "endIndex": offset + shown,
        "total": total,
    }
