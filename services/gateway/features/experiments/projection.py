"""How events change the experiments' rows (pure; see plan.py and
projection.py for the fold). A trial's and an experiment's best metric are
kept by the trials' metric statements (features/trials/projection.py)."""

import json
from typing import Any

from determined.common import states
from determined.common.expconf import SearcherConfig
from determined.proto import events_pb2
from services.common.envelope import Envelope
from services.gateway.features.commands import KILLED_OR_ENDED
from services.gateway.features.experiments.tables import experiments
from services.gateway.features.feature import Feature
from services.gateway.plan import Plan, Row, created, updated

# A config without searcher.smaller_is_better (an old event's): the config model's default.
_SMALLER_IS_BETTER: bool = SearcherConfig.model_fields["smaller_is_better"].default


def _experiment_created(plan: Plan, payload: events_pb2.ExperimentCreated, at: int) -> None:
    plan.change("experiments", payload.experiment_id, created(experiment_row(payload, at)))


def _experiment_state_changed(plan: Plan, payload: events_pb2.ExperimentStateChanged, at: int) -> None:
    state = states.experiment_state(payload.state).value
    plan.change("experiments", payload.experiment_id, (_set_experiment_state, (state, at, payload.reason)))


def _experiment_kill_requested(plan: Plan, payload: events_pb2.ExperimentKillRequested, at: int) -> None:
    plan.change("experiments", payload.experiment_id, (_kill_experiment, ()))


def _experiment_cancel_requested(plan: Plan, payload: events_pb2.ExperimentCancelRequested, at: int) -> None:
    plan.change("experiments", payload.experiment_id, (_cancel_experiment, ()))


def _experiment_continued(plan: Plan, payload: events_pb2.ExperimentContinued, at: int) -> None:
    plan.change("experiments", payload.experiment_id, (_continue_experiment, (payload.config_json,)))


def _experiment_progress_changed(plan: Plan, payload: events_pb2.ExperimentProgressChanged, at: int) -> None:
    plan.change("experiments", payload.experiment_id, updated(progress=payload.progress))


def _experiment_archive_set(plan: Plan, payload: events_pb2.ExperimentArchiveSet, at: int) -> None:
    plan.change("experiments", payload.experiment_id, updated(archived=payload.archived))


def _experiment_details_set(plan: Plan, payload: events_pb2.ExperimentDetailsSet, at: int) -> None:
    """The fields present change; the stored config stays as created."""
    changes: dict[str, Any] = {
        field: getattr(payload, field)
        for field in ("name", "description", "notes")
        if payload.HasField(field)
    }
    if payload.HasField("labels"):
        changes["labels"] = json.dumps(list(payload.labels.labels))
    if changes:
        plan.change("experiments", payload.experiment_id, updated(**changes))


def _checkpoint_gc_policy_changed(plan: Plan, payload: events_pb2.CheckpointGcPolicyChanged, at: int) -> None:
    policy = {
        "save_experiment_best": payload.save_experiment_best,
        "save_trial_best": payload.save_trial_best,
        "save_trial_latest": payload.save_trial_latest,
    }
    plan.change("experiments", payload.experiment_id, (_set_gc_policy, (policy,)))


def _experiment_delete_requested(plan: Plan, envelope: Envelope) -> None:
    experiment_id = envelope.experiment_delete_requested.experiment_id
    plan.change("experiments", experiment_id, (_ask_experiment_deletion, (envelope.event_id,)))


def _experiment_deleted(plan: Plan, payload: events_pb2.ExperimentDeleted, at: int) -> None:
    plan.change("experiments", payload.experiment_id, updated(state="DELETED", delete_error=""))


def _experiment_delete_failed(plan: Plan, payload: events_pb2.ExperimentDeleteFailed, at: int) -> None:
    plan.change("experiments", payload.experiment_id, (_fail_experiment_deletion, (payload.reason,)))


def _job_resources_changed(plan: Plan, payload: events_pb2.JobResourcesChanged, at: int) -> None:
    """An experiment's job: its stored config shows the new priority, weight or
    max_slots (max_slots 0, no cap, shows as null, as an unset one does)."""
    kind, _, key = payload.job_id.partition("/")
    if kind != "experiment" or not key.isdigit():
        return
    changes: dict[str, Any] = {}
    if payload.HasField("priority"):
        changes["priority"] = payload.priority
    if payload.HasField("weight"):
        changes["weight"] = payload.weight
    if payload.HasField("max_slots"):
        changes["max_slots"] = payload.max_slots or None
    if changes:
        plan.change("experiments", int(key), (_set_resources, (changes,)))


def _set_experiment_state(row: Row | None, state: str, at: int, reason: str) -> Row | None:
    """The new state and why; a terminal state's end time is the first one's."""
    if row is not None:
        row["state"] = state
        terminal = state in states.TERMINAL_STATES
        row["ended_at_ns"] = (
            (row["ended_at_ns"] if row["ended_at_ns"] is not None else at) if terminal else None
        )
        row["end_reason"] = reason
    return row


def _kill_experiment(row: Row | None) -> Row | None:
    """STOPPING_KILLED, unless it has ended already (or is being deleted)."""
    if row is not None and row["state"] not in states.EXPERIMENT_ENDED_STATES:
        row["state"] = "STOPPING_KILLED"
    return row


def _cancel_experiment(row: Row | None) -> Row | None:
    """STOPPING_CANCELED, unless it has ended or is being killed already."""
    if row is not None and row["state"] not in KILLED_OR_ENDED:
        row["state"] = "STOPPING_CANCELED"
    return row


def _continue_experiment(row: Row | None, config_json: str) -> Row | None:
    """An ended experiment trains again under the continued config: ACTIVE,
    its end and progress cleared (as Determined's ContinueExperiment)."""
    if row is not None and row["state"] in states.TERMINAL_STATES:
        row.update(state="ACTIVE", ended_at_ns=None, end_reason="", progress=0.0, config_json=config_json)
        row.update(_config_columns(_json_object(config_json)))
    return row


def _set_resources(row: Row | None, changes: dict[str, Any]) -> Row | None:
    if row is not None:
        config = _json_object(row["config_json"])
        config["resources"] = {**(config.get("resources") or {}), **changes}
        row["config_json"] = json.dumps(config, sort_keys=True)
    return row


def _set_gc_policy(row: Row | None, policy: dict[str, int]) -> Row | None:
    """The stored config's checkpoint_storage section shows the new policy."""
    if row is not None:
        config = _json_object(row["config_json"])
        config["checkpoint_storage"] = {**(config.get("checkpoint_storage") or {}), **policy}
        row["config_json"] = json.dumps(config, sort_keys=True)
    return row


def _ask_experiment_deletion(row: Row | None, request_id: str) -> Row | None:
    """DELETING, from an ended or DELETE_FAILED experiment (from any other
    state the state stays). The request counts once however often it is
    applied: its event id joins the set of requests."""
    if row is not None:
        requests = set(json.loads(row["delete_requests"])) | {request_id}
        row["delete_requests"] = json.dumps(sorted(requests))
        if row["state"] in states.EXPERIMENT_DELETABLE_STATES:
            row["state"] = "DELETING"
            row["delete_error"] = ""
    return row


def _fail_experiment_deletion(row: Row | None, reason: str) -> Row | None:
    if row is not None and row["state"] == "DELETING":
        row["state"] = "DELETE_FAILED"
        row["delete_error"] = reason
    return row


def experiment_row(payload: events_pb2.ExperimentCreated, at: int) -> Row:
    config = _json_object(payload.config_json)
    return {
        "id": payload.experiment_id,
        "name": payload.name,
        "owner": payload.owner,
        "state": "ACTIVE" if payload.activate else "PAUSED",
        "started_at_ns": at,
        "ended_at_ns": None,
        "description": str(config.get("description") or ""),
        "labels": json.dumps(list(config.get("labels") or [])),
        **_config_columns(config),
        "config_json": payload.config_json,
        "context_hash": payload.context_hash,
        "end_reason": "",
        "progress": None,
        "delete_requests": "[]",
        "delete_error": "",
        "best_metric": None,
        "archived": False,
        "notes": "",
        "parent_id": payload.parent_id,
        "unmanaged": payload.unmanaged,
    }


def _config_columns(config: dict[str, Any]) -> Row:
    """The columns an experiment's config decides (its pool and searcher)."""
    searcher = config.get("searcher") or {}
    resources = config.get("resources") or {}
    return {
        "resource_pool": str(resources.get("resource_pool") or ""),
        "searcher_name": str(searcher.get("name") or ""),
        "searcher_metric": str(searcher.get("metric") or ""),
        "smaller_is_better": bool(searcher.get("smaller_is_better", _SMALLER_IS_BETTER)),
    }


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


FEATURE = Feature(
    "experiments",
    row_tables=(experiments,),
    rules={
        "experiment_created": _experiment_created,
        "experiment_state_changed": _experiment_state_changed,
        "experiment_kill_requested": _experiment_kill_requested,
        "experiment_cancel_requested": _experiment_cancel_requested,
        "experiment_continued": _experiment_continued,
        "experiment_progress_changed": _experiment_progress_changed,
        "experiment_archive_set": _experiment_archive_set,
        "experiment_details_set": _experiment_details_set,
        "checkpoint_gc_policy_changed": _checkpoint_gc_policy_changed,
        "experiment_deleted": _experiment_deleted,
        "experiment_delete_failed": _experiment_delete_failed,
        "job_resources_changed": _job_resources_changed,
    },
    envelope_rules={"experiment_delete_requested": _experiment_delete_requested},
    listed_events=frozenset(
        {
            "experiment_created",
            "experiment_state_changed",
            "experiment_kill_requested",
            "experiment_cancel_requested",
            "experiment_continued",
            "experiment_progress_changed",
            "experiment_archive_set",
            "experiment_details_set",
            "experiment_delete_requested",
            "experiment_deleted",
            "experiment_delete_failed",
        }
    ),
    cluster_events=frozenset(
        {
            "experiment_created",
            "experiment_state_changed",
            "experiment_kill_requested",
            "experiment_cancel_requested",
            "experiment_continued",
            "job_resources_changed",
        }
    ),
)
