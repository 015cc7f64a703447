"""`det job update` turned into events (pure): an experiment's or a task's
job's priority, weight and max_slots. Message id:
`job-resources-<experiment or task>-<version>-<hash of the change>`."""

import hashlib
import json
import math
from dataclasses import dataclass

from determined.proto import api_pb2, events_pb2
from services.common.envelope import Append, aggregate
from services.common.scheduling import DEFAULT_WEIGHT
from services.gateway.errors import InvalidArgumentError
from services.gateway.features.commands import Unchanged


def task_of_job(job_id: str) -> str | None:
    """The task id of a task's job ("task/<task id>"); None for another job."""
    kind, slash, key = job_id.strip().partition("/")
    return key if slash and kind == "task" else None


def checked_job_id(job_id: str) -> int:
    """The experiment id of a job id: "experiment/7", or a bare "7"."""
    kind, slash, key = job_id.strip().rpartition("/")
    if (slash and kind != "experiment") or not key.isdigit() or int(key) < 1:
        raise InvalidArgumentError(
            f"job_id {job_id[:80]!r} is not an experiment's job id (experiment/<id>, or the id alone)"
            " nor a task's (task/<task id>)"
        )
    return int(key)


@dataclass(frozen=True)
class JobResources:
    """What the scheduler uses of a job: its priority, weight and max_slots (0: no cap)."""

    priority: int
    weight: float
    max_slots: int


def job_resources_changed(
    experiment_id: int, request: api_pb2.UpdateJobRequest, current: JobResources, owner: str, version: int
) -> Append | Unchanged:
    """An experiment's job change, on the experiment (see `resources_changed`)."""
    job_id = aggregate("experiment", experiment_id)
    return resources_changed(job_id, job_id, request, current, owner, version)


def task_job_changed(
    task_id: str, request: api_pb2.UpdateJobRequest, current: JobResources, owner: str, version: int
) -> Append | Unchanged:
    """A task's job change ("task/<id>"), on its one allocation, where the
    scheduler reads it; a task's one allocation has no max_slots to cap."""
    if request.HasField("max_slots"):
        raise InvalidArgumentError("max_slots is for experiments' jobs: a task has one allocation")
    return resources_changed(
        aggregate("task", task_id), aggregate("allocation", f"{task_id}.1"), request, current, owner, version
    )


def resources_changed(
    job_id: str, on: str, request: api_pb2.UpdateJobRequest, current: JobResources, owner: str, version: int
) -> Append | Unchanged:
    """Validates the fields the request sets (priority 1..99, weight > 0,
    max_slots >= 0) and appends those that differ from `current` on the
    aggregate `on` (at its `version`); Unchanged when none does."""
    if not (request.HasField("priority") or request.HasField("weight") or request.HasField("max_slots")):
        raise InvalidArgumentError("set at least one of priority, weight and max_slots")
    if request.HasField("priority") and not 1 <= request.priority <= 99:
        raise InvalidArgumentError(
            f"priority must be from 1 to 99 (lower runs first), not {request.priority}"
        )
    if request.HasField("weight") and not (math.isfinite(request.weight) and request.weight > 0):
        raise InvalidArgumentError(f"weight must be a number above 0, not {request.weight}")
    if request.HasField("max_slots") and request.max_slots < 0:
        raise InvalidArgumentError(f"max_slots must be 0 (no cap) or more, not {request.max_slots}")
    payload = events_pb2.JobResourcesChanged(job_id=job_id, owner=owner)
    if request.HasField("priority") and request.priority != current.priority:
        payload.priority = request.priority
    if request.HasField("weight") and request.weight != current.weight:
        payload.weight = request.weight
    if request.HasField("max_slots") and request.max_slots != current.max_slots:
        payload.max_slots = request.max_slots
    changed = [name for name in ("priority", "weight", "max_slots") if payload.HasField(name)]
    if not changed:
        return Unchanged(f"Job {job_id} has these values already: nothing to change")
    digest = hashlib.sha256(payload.SerializeToString(deterministic=True)).hexdigest()[:16]
    key = job_id.partition("/")[2]
    return Append(on, payload, f"job-resources-{key}-{version}-{digest}", version)


def job_resources(config_json: str, default_priority: int) -> JobResources:
    """An experiment's priority, weight and max_slots as its stored config says
    (the projection folds JobResourcesChanged into it)."""
    try:
        resources = json.loads(config_json or "{}").get("resources") or {}
    except (ValueError, AttributeError):
        resources = {}
    return JobResources(
        int(resources.get("priority") or default_priority),
        float(resources.get("weight") or DEFAULT_WEIGHT),
        int(resources.get("max_slots") or 0),
    )
