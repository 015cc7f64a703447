"""Checkpoints, their garbage collection and their deletion as the gateway
answers and records them: pure functions over what the read models say, for
the functions in service.py. No I/O, no clock.

What the gateway appends starts the checkpoint service's saga (see
events.proto): it checks and records what a user (or a trial) asks, and the
service decides which files go. Message ids: `gc-policy-<experiment>-<version>`
(version: the experiment's last event when the policy was set),
`delete-asked-<experiment>-<hash of the uuids, globs and who asked>` (the same
request asked again is stored once), `experiment-delete-<experiment>-<n>` (n:
the how-many-th deletion asked of the experiment, so that a DELETE_FAILED one
can be asked again), and a trial's checkpoint report `checkpoint-<uuid>`.
"""

import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

from determined.common import states, storage
from determined.proto import api_pb2, events_pb2
from services.common.envelope import Append, aggregate
from services.common.gc_policy import CheckpointFacts, GcPolicy, checkpoints_to_delete, policy_of
from services.gateway.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
)
from services.gateway.features.commands import Unchanged, check_json_object

# The sort_by values of the checkpoint listings that are not a metric's name.
SORT_BY_REPORT_TIME = ""
SORT_BY_SEARCHER_METRIC = "searcher_metric"
SORT_BY_STEPS = "steps_completed"
ORDERS = ("", "asc", "desc")
# Determined's packaged default policy (a section without save_* keeps these).
DEFAULT_POLICY = policy_of(None)
# The states an experiment may be deleted from, in the order users read them.
_DELETABLE = [state.value for state in states.ExperimentState if state in states.EXPERIMENT_DELETABLE_STATES]
# How a metric the gateway stored as a string (PostgreSQL's jsonb has no NaN) reads back.
_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def metric_value(metrics_json: str, name: str) -> float | None:
    """The metric `name` of a validation's metrics as a number (NaN and the
    infinities included); None when the validation lacks it or it is not a number."""
    if not metrics_json or not name:
        return None
    try:
        metrics = json.loads(metrics_json)
    except ValueError:
        return None
    value = metrics.get(name) if isinstance(metrics, dict) else None
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    return _NON_FINITE.get(value) if isinstance(value, str) else None


# -- listings ------------------------------------------------------------------------


@dataclass(frozen=True)
class Listing:
    """A checked listing request (GetExperimentCheckpoints, GetTrialCheckpoints)."""

    sort_by: str
    order_by: str
    max_results: int
    include_deleted: bool


def checked_listing(sort_by: str, order_by: str, max_results: int, include_deleted: bool) -> Listing:
    order = order_by.strip().lower()
    if order not in ORDERS:
        raise InvalidArgumentError(
            f"order_by must be asc, desc or empty (the sort's own order), not {order_by!r}"
        )
    if max_results < 0:
        raise InvalidArgumentError(f"max_results must be 0 (all) or more, not {max_results}")
    return Listing(sort_by.strip(), order, max_results, include_deleted)


def listed(
    checkpoints: Sequence[api_pb2.Checkpoint],
    listing: Listing,
    *,
    searcher_metric: str,
    smaller_is_better: bool,
) -> list[api_pb2.Checkpoint]:
    """The checkpoints a listing shows: without DELETED ones unless asked,
    sorted, the first max_results (all when 0)."""
    shown = [c for c in checkpoints if listing.include_deleted or c.state != "DELETED"]
    ordered = sorted_checkpoints(
        shown,
        listing.sort_by,
        listing.order_by,
        searcher_metric=searcher_metric,
        smaller_is_better=smaller_is_better,
    )
    return ordered[: listing.max_results] if listing.max_results else ordered


def sorted_checkpoints(
    checkpoints: Iterable[api_pb2.Checkpoint],
    sort_by: str,
    order_by: str,
    *,
    searcher_metric: str,
    smaller_is_better: bool,
) -> list[api_pb2.Checkpoint]:
    """Sorted as api.proto says. Natural orders: report time and steps
    ascending; the searcher metric (asked as "searcher_metric" or by its
    name) best first; another metric ascending. Checkpoints without the
    metric (or with NaN) come last in either order; ties keep report order."""
    by_report = sorted(checkpoints, key=lambda c: (c.reported_at_ns, c.uuid))
    if sort_by == SORT_BY_REPORT_TIME:
        return by_report[::-1] if order_by == "desc" else by_report
    if sort_by == SORT_BY_STEPS:
        return sorted(by_report, key=lambda c: c.steps_completed, reverse=order_by == "desc")
    if sort_by in (SORT_BY_SEARCHER_METRIC, searcher_metric):
        descending = not smaller_is_better if order_by == "" else order_by == "desc"

        def value(checkpoint: api_pb2.Checkpoint) -> float | None:
            return checkpoint.searcher_metric if checkpoint.HasField("searcher_metric") else None
    else:
        descending = order_by == "desc"

        def value(checkpoint: api_pb2.Checkpoint) -> float | None:
            return metric_value(checkpoint.validation_metrics_json, sort_by)

    valued = [(v, c) for c in by_report if (v := value(c)) is not None and not math.isnan(v)]
    unvalued = [c for c in by_report if (v := value(c)) is None or math.isnan(v)]
    valued.sort(key=lambda pair: pair[0], reverse=descending)
    return [c for _, c in valued] + unvalued


# -- garbage collection ------------------------------------------------------------------


def stored_policy(config_json: str) -> GcPolicy:
    """The policy an experiment's stored config holds (its checkpoint_storage's save_* knobs)."""
    try:
        section = json.loads(config_json or "{}").get("checkpoint_storage") or {}
    except (ValueError, AttributeError):
        section = {}
    return GcPolicy(
        save_experiment_best=int(section.get("save_experiment_best", DEFAULT_POLICY.save_experiment_best)),
        save_trial_best=int(section.get("save_trial_best", DEFAULT_POLICY.save_trial_best)),
        save_trial_latest=int(section.get("save_trial_latest", DEFAULT_POLICY.save_trial_latest)),
    )


def checked_policy(save_experiment_best: int, save_trial_best: int, save_trial_latest: int) -> GcPolicy:
    given = {
        "save_experiment_best": save_experiment_best,
        "save_trial_best": save_trial_best,
        "save_trial_latest": save_trial_latest,
    }
    negative = [f"{name} ({value})" for name, value in given.items() if value < 0]
    if negative:
        raise InvalidArgumentError(
            f"a GC policy keeps 0 or more checkpoints; negative: {', '.join(negative)}"
        )
    return GcPolicy(save_experiment_best, save_trial_best, save_trial_latest)


@dataclass(frozen=True)
class GcInputs:
    """What a GC policy is applied to: an experiment's checkpoints (every
    state), when each one's validation was reported (uuid -> ns; none: no
    validation), and those it must keep whatever the policy (model versions,
    warm-start sources)."""

    checkpoints: list[api_pb2.Checkpoint]
    validated_at_ns: Mapping[str, int]
    smaller_is_better: bool
    protected: AbstractSet[str]


def gc_deletes(inputs: GcInputs, policy: GcPolicy) -> list[api_pb2.Checkpoint]:
    """The checkpoints `policy` deletes now (services/common/gc_policy.py), in
    report order: what `det experiment set gc-policy` previews."""
    candidates = sorted(
        (c for c in inputs.checkpoints if c.state in states.CHECKPOINT_DELETABLE_STATES),
        key=lambda c: (c.reported_at_ns, c.uuid),
    )
    validations = sorted(
        (inputs.validated_at_ns[c.uuid], c.uuid) for c in candidates if c.uuid in inputs.validated_at_ns
    )
    validation_order = {uuid: order for order, (_, uuid) in enumerate(validations, start=1)}
    facts = [
        CheckpointFacts(
            uuid=c.uuid,
            trial_id=c.trial_id,
            steps_completed=c.steps_completed,
            searcher_metric=c.searcher_metric if c.HasField("searcher_metric") else None,
            validation_order=validation_order.get(c.uuid, 0),
            reported_order=order,
        )
        for order, c in enumerate(candidates, start=1)
    ]
    deleted = set(
        checkpoints_to_delete(
            facts, policy, smaller_is_better=inputs.smaller_is_better, protected=inputs.protected
        )
    )
    return [c for c in candidates if c.uuid in deleted]


def freed_bytes(checkpoints: Iterable[api_pb2.Checkpoint]) -> int:
    """What deleting these checkpoints frees: the sizes of their recorded files."""
    return sum(sum(c.resources.values()) for c in checkpoints)


def gc_policy_changed(
    experiment_id: int, state: str, current: GcPolicy, new: GcPolicy, deletes_now: int, version: int
) -> Append | Unchanged:
    """The experiment's new policy (`det experiment set gc-policy`), which the
    checkpoint service applies at once to an ended experiment. Setting the
    policy it has again applies it again to an ended experiment that it
    still deletes checkpoints of (`deletes_now`: how many; files the storage
    refused to delete are tried again); else Unchanged. Refused while the
    experiment is being deleted."""
    if state in states.EXPERIMENT_DELETION_STATES:
        raise FailedPreconditionError(
            f"experiment {experiment_id} is {state}: its GC policy no longer applies"
        )
    if new == current and not (state in states.TERMINAL_STATES and deletes_now):
        return Unchanged(
            f"Experiment {experiment_id} has this GC policy already ({_described(new)}): nothing to change"
        )
    payload = events_pb2.CheckpointGcPolicyChanged(
        experiment_id=experiment_id,
        save_experiment_best=new.save_experiment_best,
        save_trial_best=new.save_trial_best,
        save_trial_latest=new.save_trial_latest,
    )
    return Append(
        aggregate("experiment", experiment_id), payload, f"gc-policy-{experiment_id}-{version}", version
    )


def _described(policy: GcPolicy) -> str:
    return (
        f"save_experiment_best {policy.save_experiment_best}, save_trial_best {policy.save_trial_best},"
        f" save_trial_latest {policy.save_trial_latest}"
    )


# -- deletion ------------------------------------------------------------------------------


def check_owner_or_admin(experiment_id: int, owner: str, username: str, *, admin: bool, what: str) -> None:
    """Only its owner or an admin may do `what` to an experiment: what destroys
    its data (deleting it, its checkpoints, or setting a GC policy). Determined's
    basic mode lets any user do the latter two; pausing or killing stays open to all."""
    if username != owner and not admin:
        raise PermissionDeniedError(
            f"experiment {experiment_id} belongs to {owner}: only its owner or an admin may {what},"
            f" and {username} is neither"
        )


def check_may_delete_checkpoints(
    checkpoints: Iterable[api_pb2.Checkpoint], owners: Mapping[int, str], username: str, *, admin: bool
) -> None:
    """A user deletes checkpoints only of experiments they own, unless an admin
    (a trial process deletes its own trial's: see checkpoint_delete_asked)."""
    by_experiment: dict[int, list[str]] = {}
    for checkpoint in checkpoints:
        by_experiment.setdefault(checkpoint.experiment_id, []).append(checkpoint.uuid)
    for experiment_id, uuids in sorted(by_experiment.items()):
        check_owner_or_admin(
            experiment_id,
            owners.get(experiment_id, ""),
            username,
            admin=admin,
            what=f"delete its checkpoints ({', '.join(uuids)})",
        )


def experiment_delete_requested(
    experiment_id: int,
    state: str,
    delete_requests: int,
    model_versions: Mapping[str, Sequence[str]],
    version: int,
) -> Append | Unchanged:
    """The deletion of an ended (or DELETE_FAILED) experiment: the checkpoint
    service deletes all its checkpoints, then the experiment disappears.
    `model_versions`: uuid -> the versions it is registered as, for every
    checkpoint of the experiment that is one (the deletion is then refused);
    `delete_requests`: the deletions asked of it before."""
    if state == "DELETING":
        return Unchanged(f"Experiment {experiment_id} is being deleted already")
    if state not in states.EXPERIMENT_DELETABLE_STATES:
        raise FailedPreconditionError(
            f"experiment {experiment_id} is {state}: only {', '.join(_DELETABLE[:-1])} or"
            f" {_DELETABLE[-1]} experiments can be deleted (kill it and wait for it to end first)"
        )
    if model_versions:
        registered = "; ".join(
            f"{uuid} ({', '.join(names)})" for uuid, names in sorted(model_versions.items())
        )
        raise FailedPreconditionError(
            f"experiment {experiment_id} cannot be deleted: checkpoints of it are model versions: {registered}"
        )
    payload = events_pb2.ExperimentDeleteRequested(experiment_id=experiment_id)
    msg_id = f"experiment-delete-{experiment_id}-{delete_requests + 1}"
    return Append(aggregate("experiment", experiment_id), payload, msg_id, version)


def checked_globs(globs: Sequence[str]) -> list[str]:
    """`det checkpoint rm --glob`: patterns relative to the checkpoint's folder."""
    for glob in globs:
        if not glob.strip():
            raise InvalidArgumentError("a glob may not be empty")
        if ".." in glob.split("/") or glob.startswith("/"):
            raise InvalidArgumentError(
                f"a glob names files inside the checkpoint: {glob!r} reaches outside it"
            )
    return list(dict.fromkeys(globs))


def checkpoint_delete_asked(
    uuids: Sequence[str],
    found: Mapping[str, api_pb2.Checkpoint],
    globs: Sequence[str],
    *,
    warm_start_sources: AbstractSet[str],
    actor: str,
    trial_id: int | None,
) -> list[Append]:
    """One CheckpointDeleteAsked per experiment whose checkpoints are named
    (DELETED ones are left out: nothing of them is left). Refused whole when
    one is unknown (NOT_FOUND), for a trial process (`trial_id`) another
    trial's (PERMISSION_DENIED), or one the checkpoint service never deletes:
    a model version or a warm-start source (INVALID_ARGUMENT)."""
    asked = list(dict.fromkeys(uuid.strip() for uuid in uuids))
    if not asked or not all(asked):
        raise InvalidArgumentError("name the checkpoints to delete by their uuids")
    checked = checked_globs(globs)
    unknown = [uuid for uuid in asked if uuid not in found]
    if unknown:
        raise NotFoundError(f"no checkpoint has the uuid {', '.join(unknown)}")
    if trial_id is not None:
        foreign = [uuid for uuid in asked if found[uuid].trial_id != trial_id]
        if foreign:
            raise PermissionDeniedError(
                f"trial {trial_id} may delete its own checkpoints only, not {', '.join(foreign)}"
            )
    registered = [
        f"{uuid} ({', '.join(found[uuid].model_versions)})" for uuid in asked if found[uuid].model_versions
    ]
    if registered:
        raise InvalidArgumentError(
            f"checkpoints registered as model versions are never deleted: {', '.join(registered)}"
        )
    sources = [uuid for uuid in asked if uuid in warm_start_sources]
    if sources:
        raise InvalidArgumentError(
            f"checkpoints that experiments warm-start from are never deleted: {', '.join(sources)}"
        )
    by_experiment: dict[int, list[str]] = {}
    for uuid in asked:
        if found[uuid].state != "DELETED":
            by_experiment.setdefault(found[uuid].experiment_id, []).append(uuid)
    appends = []
    for experiment_id, named in sorted(by_experiment.items()):
        payload = events_pb2.CheckpointDeleteAsked(
            experiment_id=experiment_id, uuids=named, globs=checked, asked_by=actor
        )
        digest = hashlib.sha256(json.dumps([named, checked, actor]).encode()).hexdigest()[:32]
        appends.append(
            Append(aggregate("experiment", experiment_id), payload, f"delete-asked-{experiment_id}-{digest}")
        )
    return appends


# -- downloads ------------------------------------------------------------------------------


def downloaded_size(checkpoint: api_pb2.Checkpoint, path: str, offset: int) -> int:
    """The size of the checkpoint's file `path` (one of its recorded files:
    nothing else of the storage is served), checking `offset` against it."""
    if checkpoint.state == "DELETED":
        raise NotFoundError(f"checkpoint {checkpoint.uuid} was deleted")
    if path.endswith("/") and path in checkpoint.resources:
        raise InvalidArgumentError(
            f"{path!r} is a folder of checkpoint {checkpoint.uuid}; download its files"
        )
    if path not in checkpoint.resources:
        raise NotFoundError(f"checkpoint {checkpoint.uuid} has no file {path!r}")
    size = checkpoint.resources[path]
    if not 0 <= offset <= size:
        raise InvalidArgumentError(f"offset must be from 0 to the file's size ({size}), not {offset}")
    return int(size)


def storage_section(storage_json: str) -> dict[str, Any]:
    """The checkpoint_storage section of the checkpoint's experiment."""
    try:
        section = json.loads(storage_json or "null")
    except ValueError:
        section = None
    if not isinstance(section, dict):
        raise FailedPreconditionError("the checkpoint's experiment has no checkpoint_storage section")
    return section


def checkpoint_reported(
    request: api_pb2.ReportCheckpointRequest, experiment_id: int, reported_at_ns: int
) -> Append:
    if not request.uuid:
        raise InvalidArgumentError("a checkpoint needs a uuid")
    check_checkpoint_names(request.uuid, dict(request.resources))
    if request.metadata_json:
        check_json_object(request.metadata_json, "metadata_json")
    payload = events_pb2.CheckpointReported(
        uuid=request.uuid,
        trial_id=request.trial_id,
        experiment_id=experiment_id,
        allocation_id=request.allocation_id,
        steps_completed=request.steps_completed,
        metadata_json=request.metadata_json,
        resources=request.resources,
        reported_at_ns=reported_at_ns,
    )
    return Append(aggregate("checkpoint", request.uuid), payload, f"checkpoint-{request.uuid}")


def check_checkpoint_names(uuid: str, resources: dict[str, int]) -> None:
    """A reported checkpoint's uuid (it names the checkpoint's folder) and its files'
    names (relative POSIX paths inside it, folders as `dir/`; the one rule of
    `storage.check_relpath`) and sizes; InvalidArgumentError naming the first bad one."""
    try:
        storage.check_storage_id(uuid)
    except ValueError:
        raise InvalidArgumentError(
            f"checkpoint uuid {uuid[:80]!r} cannot name a checkpoint's folder (empty, '.', '..', or with a slash)"
        ) from None
    for name, size in sorted(resources.items()):
        try:
            storage.check_relpath(name)
        except ValueError as problem:
            raise InvalidArgumentError(
                f"checkpoint {uuid} lists the file {name[:200]!r}: {problem}"
            ) from None
        if size < 0:
            raise InvalidArgumentError(
                f"checkpoint {uuid} lists {name[:200]!r} with a negative size ({size})"
            )
