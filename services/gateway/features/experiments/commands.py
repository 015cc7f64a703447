"""Experiment commands turned into events: pure validation of what users ask
for, and the Appends that record it. The shell (service.py) hands in
everything that is not pure: ids, the seed, the petname, the clock.

Message ids are derived from the request, so a retried append is stored once:
`create-<request_id>`, `kill-<experiment>`, `activate-<experiment>-<version>`,
`pause-<experiment>-<version>`.
"""

import json
import re
from dataclasses import dataclass

from determined.common import expconf, states
from determined.common.limits import MAX_CONTEXT_BYTES
from determined.proto import events_pb2
from services.common.envelope import Append, aggregate
from services.common.trial_runtime import DOCKER, unused_anywhere_here, unused_in_processes
from services.gateway.errors import FailedPreconditionError, InvalidArgumentError
from services.gateway.features.commands import KILLED_OR_ENDED, Unchanged


@dataclass(frozen=True)
class ValidatedConfig:
    config_json: str
    name: str
    warnings: list[str]


def validate_config(
    config_yaml: str,
    *,
    checkpoint_host_path: str,
    experiment_seed: int,
    name: str,
    checkpoint_storage: expconf.CheckpointStorage | None = None,
    unmanaged: bool = False,
) -> ValidatedConfig:
    """The fully defaulted config (`checkpoint_storage`: the cluster's default storage), or
    InvalidArgumentError listing every problem (expconf also requires the entrypoint of a
    managed experiment: not of a detached run, `unmanaged`), or naming the config limit it goes past (size, nesting, values
    with aliases expanded, hyperparameter values: expconf's `_limits.py`, checked before
    anything is expanded). CPU-bound for up to about a second on a config at the limits:
    service.py runs it in a worker thread."""
    try:
        config = expconf.load_config(config_yaml, unmanaged=unmanaged)
        config = expconf.apply_cluster_defaults(
            config,
            checkpoint_host_path=checkpoint_host_path,
            experiment_seed=experiment_seed,
            name=name,
            checkpoint_storage=checkpoint_storage,
        )
    except expconf.InvalidConfigError as error:
        raise InvalidArgumentError("invalid experiment config:\n" + "\n".join(error.errors)) from error
    stored = config.to_json_dict()
    return ValidatedConfig(
        json.dumps(stored, sort_keys=True), str(stored.get("name") or name), config.warnings()
    )


def check_context_size(size: int, *, complete: bool = True) -> None:
    """Refuses a context archive past MAX_CONTEXT_BYTES; `complete=False`
    while it is still arriving (`size` bytes so far)."""
    if size > MAX_CONTEXT_BYTES:
        told = f"{size / 2**20:.1f} MiB" if complete else f"more than {MAX_CONTEXT_BYTES / 2**20:.0f} MiB"
        raise InvalidArgumentError(
            f"the context directory is {told} packed; at most {MAX_CONTEXT_BYTES / 2**20:.0f} MiB is allowed"
            " (list what to leave out in .detignore)"
        )


def check_uploaded(claimed_hash: str, received_hash: str) -> None:
    """An upload is kept only when its last request named the hash of what
    arrived: without one it was cut short, with another it was damaged."""
    if not claimed_hash:
        raise InvalidArgumentError("the context upload ended before its last request: it was cut short")
    if claimed_hash != received_hash:
        raise InvalidArgumentError(
            f"the context upload was damaged: it says {claimed_hash[:80]!r} but what arrived hashes to {received_hash}"
        )


CONTEXT_HASH = re.compile(r"[0-9a-f]{64}")


def checked_context_hash(context_hash: str) -> str:
    """The hash of an uploaded context (sha256, hex), as UploadContext answered it."""
    if not CONTEXT_HASH.fullmatch(context_hash):
        raise InvalidArgumentError(
            f"context_hash {context_hash[:80]!r} is not the sha256 (64 hex digits) UploadContext answers"
        )
    return context_hash


def experiment_created(
    experiment_id: int,
    request_id: str,
    config: ValidatedConfig,
    *,
    owner: str,
    context_hash: str,
    context_size: int,
    activate: bool,
    parent_id: int = 0,
    unmanaged: bool = False,
    source_trial_checkpoint_uuid: str = "",
) -> Append:
    """The creation; `parent_id`: the experiment a fork starts from (0: none);
    `source_trial_checkpoint_uuid`: what a warm start from another trial starts from."""
    payload = events_pb2.ExperimentCreated(
        experiment_id=experiment_id,
        name=config.name,
        owner=owner,
        config_json=config.config_json,
        context_hash=context_hash,
        context_size=context_size,
        activate=activate,
        parent_id=parent_id,
        unmanaged=unmanaged,
        source_trial_checkpoint_uuid=source_trial_checkpoint_uuid,
    )
    return Append(aggregate("experiment", experiment_id), payload, f"create-{request_id}", expected_version=0)


def activated(experiment_id: int, state: str, version: int) -> Append | Unchanged:
    """The activation of a PAUSED experiment (created paused, or paused while
    it ran); Unchanged when it is active already or has ended."""
    return _state_changed(experiment_id, state, version, events_pb2.EXPERIMENT_STATE_ACTIVE, "activate")


def paused(experiment_id: int, state: str, version: int) -> Append | Unchanged:
    """The pause of an ACTIVE experiment: its trials stop (to be resumed when
    it is activated) and no new ones start; Unchanged when it is paused
    already or has ended."""
    return _state_changed(experiment_id, state, version, events_pb2.EXPERIMENT_STATE_PAUSED, "pause")


def check_managed(experiment_id: int, unmanaged: bool, action: str) -> None:
    """FailedPreconditionError when the experiment is a detached run: its script
    trains it outside the cluster, which can neither pause nor activate it."""
    if unmanaged:
        raise FailedPreconditionError(f"experiment {experiment_id} is a detached run: it cannot be {action}d")


def _state_changed(
    experiment_id: int, state: str, version: int, target: events_pb2.ExperimentState, action: str
) -> Append | Unchanged:
    """A user's change between ACTIVE and PAUSED, decided against the
    experiment's `version` (so two racing changes append once and neither
    undoes a state it did not see). An experiment that is stopping can be
    neither paused nor activated: refused, as it is neither there already
    nor over."""
    if state in states.EXPERIMENT_ENDED_STATES or state == states.experiment_state(target):
        return Unchanged(f"Experiment {experiment_id} is already {state}: nothing to {action}")
    if states.is_stopping(state):
        raise FailedPreconditionError(f"experiment {experiment_id} is {state} and cannot be {action}d")
    payload = events_pb2.ExperimentStateChanged(
        experiment_id=experiment_id, state=target, reason=f"{action}d by a user"
    )
    return Append(
        aggregate("experiment", experiment_id), payload, f"{action}-{experiment_id}-{version}", version
    )


REQUEST_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def checked_request_id(request_id: str) -> str:
    """A client's request id ("" when it sent none); it becomes a message id."""
    if request_id and not REQUEST_ID.fullmatch(request_id):
        raise InvalidArgumentError("request_id must be 1 to 64 letters, digits, '-' or '_'")
    return request_id


def kill_requested(experiment_id: int, state: str, version: int) -> Append | Unchanged:
    """The kill request, or Unchanged when the experiment has ended or is
    being killed already. A repeated kill is stored once; its message id names
    the experiment's version it was decided at, so that the kill of a continued
    experiment is not taken for the kill before it."""
    if state in KILLED_OR_ENDED:
        return Unchanged(f"Experiment {experiment_id} is already {state}: nothing to kill")
    payload = events_pb2.ExperimentKillRequested(experiment_id=experiment_id)
    return Append(aggregate("experiment", experiment_id), payload, f"kill-{experiment_id}-{version}")


def resource_pool_of(config_json: str) -> str:
    """The pool a config names ("" when it names none: the default)."""
    resources = json.loads(config_json).get("resources") or {}
    return str(resources.get("resource_pool") or "")


def runtime_warnings(config_json: str, pool: str, runtimes: set[str] | None) -> list[str]:
    """What the config asks that the agents of `pool` cannot give: the keys only a
    container honours when the pool has agents and none runs Docker (`runtimes`:
    how its agents run allocations; None: unknown), and the keys only another kind
    of cluster honours, whatever the runtime."""
    config = json.loads(config_json)
    unused = unused_in_processes(config, f"the agents of pool {pool!r} run")
    return (unused if runtimes and DOCKER not in runtimes else []) + unused_anywhere_here(config)


def checked_resource_pool(config_json: str, known: list[str]) -> None:
    """Refuses a config whose resources.resource_pool names no known pool."""
    pool = resource_pool_of(config_json)
    if pool and pool not in known:
        raise InvalidArgumentError(
            f"resources.resource_pool {pool!r} is not a resource pool of this cluster; the pools are: "
            + ", ".join(known)
        )
