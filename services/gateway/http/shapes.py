"""The API's messages as Determined's REST API shows them: lowerCamelCase
field names, states with their `STATE_` prefix, times as RFC 3339 strings
(null when not yet), configs, hyperparameters and metrics as JSON objects
(not strings). A few fields of our own that Determined lacks (`endReason`,
`waitingReason`, the trial's `runs`) say why things are as they are.
"""

import datetime
import functools
import json
from typing import Any

from determined.proto import api_pb2, events_pb2
from services.gateway.features.logs import filters as log_filters

JSON = dict[str, Any]
# Determined prints a log line's container id in 8 characters.
LOG_CONTAINER_WIDTH = 8


def time(ns: int) -> str | None:
    """An event time (ns since the epoch) as RFC 3339 UTC; None for 0 (not yet)."""
    if not ns:
        return None
    return datetime.datetime.fromtimestamp(ns / 1e9, datetime.UTC).isoformat().replace("+00:00", "Z")


def state(name: str) -> str:
    return f"STATE_{name}" if name else "STATE_UNSPECIFIED"


# Determined's default workspace and project, where every experiment here lies (there are no
# others): its client requires an experiment's projectId and projectOwnerId.
UNCATEGORIZED = {
    "projectId": 1,
    "projectOwnerId": 1,
    "projectName": "Uncategorized",
    "workspaceId": 1,
    "workspaceName": "Uncategorized",
}


def experiment(message: api_pb2.Experiment) -> JSON:
    """As Determined's v1Experiment (`config` the expanded config; `originalConfig` its JSON text:
    the YAML as submitted is not kept), with our own `endReason`."""
    config = json.loads(message.config_json or "{}")
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
        "archived": message.archived,
        "notes": message.notes,
        "forkedFrom": message.parent_id or None,
        "unmanaged": message.unmanaged,
        "config": config,
        "originalConfig": message.config_json or "{}",
        "hyperparameters": config.get("hyperparameters") or {},
        "jobId": f"experiment/{message.id}",
        "endReason": message.end_reason,
        **UNCATEGORIZED,
    }


def metrics_workload(point: api_pb2.MetricPoint) -> JSON:
    """A reported point as Determined's MetricsWorkload."""
    return {
        "group": point.group,
        "totalBatches": point.steps_completed,
        "numInputs": 0,  # Determined's client requires it; nothing here counts inputs
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


def checkpoint(message: api_pb2.Checkpoint, experiment_config: JSON | None = None) -> JSON:
    """As Determined's v1Checkpoint. Its client reads the storage to download
    from `training.experimentConfig.checkpoint_storage`: the experiment's
    config when given, else a config holding only that section."""
    metadata = checkpoint_metadata(message)
    validation = json.loads(message.validation_metrics_json) if message.validation_metrics_json else None
    storage = json.loads(message.storage_json) if message.storage_json else None
    return {
        "uuid": message.uuid,
        "reportTime": time(message.reported_at_ns),
        "state": checkpoint_state(message.state),
        "resources": dict(message.resources),
        "sizeBytes": sum(message.resources.values()),
        "metadata": metadata,
        "training": {
            "trialId": message.trial_id,
            "experimentId": message.experiment_id,
            "experimentConfig": experiment_config or {"checkpoint_storage": storage},
            "validationMetrics": {"avgMetrics": validation} if validation is not None else None,
            "searcherMetric": message.searcher_metric if message.HasField("searcher_metric") else None,
        },
        "storage": storage,
        "modelVersions": list(message.model_versions),
        "deleteError": message.delete_error,
    }


def checkpoint_workload(message: api_pb2.Checkpoint) -> JSON:
    """A checkpoint as Determined's v1CheckpointWorkload (one of a trial's workloads)."""
    return {
        "uuid": message.uuid,
        "endTime": time(message.reported_at_ns),
        "state": checkpoint_state(message.state),
        "resources": dict(message.resources),
        "totalBatches": message.steps_completed,
        "metadata": checkpoint_metadata(message),
    }


def checkpoint_metadata(message: api_pb2.Checkpoint) -> JSON:
    metadata: JSON = json.loads(message.metadata_json or "{}")
    metadata.setdefault("steps_completed", message.steps_completed)
    return metadata


def checkpoint_state(name: str) -> str:
    """Determined's checkpoint states: one being deleted is still COMPLETED
    there until its files are gone (it has no DELETING)."""
    return state("COMPLETED" if name == "DELETING" else name)


def agent(message: api_pb2.Agent) -> JSON:
    uses = {use.slot_id: use for use in message.slot_uses}
    slots: JSON = {}
    for slot in message.slots:
        use = uses.get(slot.slot_id)
        running = use is not None and bool(use.allocation_id)
        slots[str(slot.slot_id)] = {
            "id": str(slot.slot_id),
            "device": {"id": slot.slot_id, "brand": slot.device, "type": f"TYPE_{slot.type.upper()}"},
            "enabled": message.state == "ENABLED" and (use is None or use.state in ("", "ENABLED")),
            "draining": message.state == "DRAINING" or (use is not None and use.state == "DRAINING"),
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
        "containers": {
            slot["container"]["id"]: slot["container"] for slot in slots.values() if slot["container"]
        },
        "slotStats": slot_stats(slots),
    }


def slot_stats(slots: JSON) -> JSON:
    """Determined's v1SlotStats: the agent's slots counted by device type and by brand."""
    by_type: JSON = {}
    by_brand: JSON = {}
    for slot in slots.values():
        device = slot["device"]
        for counted, key in ((by_type, device["type"]), (by_brand, device["brand"])):
            stats = counted.setdefault(key, {"total": 0, "disabled": 0, "draining": 0, "states": {}})
            stats["total"] += 1
            stats["disabled"] += not slot["enabled"]
            stats["draining"] += slot["draining"]
    return {"typeStats": by_type, "brandStats": by_brand}


def job(message: api_pb2.Job, task_type: str = "") -> JSON:
    """As Determined's v1Job; a task's job is TYPE_TASK unless its `task_type` (NOTEBOOK, ...) is given."""
    return {
        "jobId": message.job_id,
        "type": f"TYPE_{task_type or message.type}",
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
        "isPreemptible": False,
        "workspaceId": UNCATEGORIZED["workspaceId"],
    }


def log_line(response: api_pb2.TrialLogsResponse, line: events_pb2.LogLine) -> JSON:
    """One line of a TrialLogs response as Determined's v1TrialLogsResponse:
    `log` the line's text, `message` the line as Determined's `det trial logs`
    prints it ("[time] container [rank=R] || INFO: text", with its newline;
    the level is the one the text starts with, kept in the text). The
    container is the allocation; `id` names the line by allocation and time."""
    text, ns, allocation_id = line.log, line.timestamp_ns, response.allocation_id
    rank = line.rank if line.HasField("rank") else None
    container = allocation_id[:LOG_CONTAINER_WIDTH] or " " * LOG_CONTAINER_WIDTH
    rank_tag = "" if rank is None else f" [rank={rank}]"
    level = log_filters.level_of(text)
    stamp = log_time(ns)
    return {
        "id": f"{allocation_id}:{ns}",
        "trialId": response.trial_id,
        "agentId": response.agent_id,
        "containerId": allocation_id,
        "allocationId": allocation_id,
        "timestamp": stamp,
        "level": f"LOG_LEVEL_{level}" if level else "LOG_LEVEL_UNSPECIFIED",
        "stdtype": line.stdtype,
        "source": log_filters.source_of(line),
        "rankId": rank,
        "log": text,
        "message": f"[{stamp}] {container}{rank_tag} || {text}\n",
    }


def log_time(ns: int) -> str:
    """A log line's time as Determined prints it: RFC 3339 in UTC with six decimals."""
    seconds, nanoseconds = divmod(ns, 10**9)
    return f"{_second(seconds)}.{nanoseconds // 1000:06d}Z"


@functools.lru_cache(maxsize=64)
def _second(seconds: int) -> str:
    """A second's text, formatted once (a log's lines come many a second)."""
    return f"{datetime.datetime.fromtimestamp(seconds, datetime.UTC):%Y-%m-%dT%H:%M:%S}"


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
