"""Whose events a caller reads: the aggregates of an experiment, a trial, an
allocation or a task (from the read models), and who may read them.

An experiment's aggregates are experiment/N and those of each of its trials;
a trial's are trial/N, metrics/N, validation/N, its allocations and its
checkpoints; an allocation's is itself; a task's is its one allocation (which
also carries its job's changes).

Admins read every event. Another user reads the events of what they own (an
experiment, its trials, their allocations and checkpoints; a task; their own
user aggregate) and every event they appended themselves: naming something
they do not own is PermissionDeniedError; naming nothing, the log is read and
each event is kept only when `Visibility.covers` it, a membership test per
event against what the user owned when the read began.
"""

from dataclasses import dataclass
from typing import TypeVar

from services.common.envelope import Envelope
from services.gateway.auth import require_user
from services.gateway.errors import NotFoundError, PermissionDeniedError
from services.gateway.features.events.queries import Owned
from services.gateway.features.parts import Queries

T = TypeVar("T")
# The aggregate kinds whose id is a trial id.
TRIAL_KINDS = ("trial", "metrics", "validation")
# What may be named in a read: det events --experiment/--trial/--allocation/--task.
SCOPE_KINDS = ("experiment", "trial", "allocation", "task")


async def aggregates_of_trial(queries: Queries, trial_id: int) -> list[str]:
    if await queries.events.trial_experiment(trial_id) is None:
        raise NotFoundError(f"trial {trial_id} not found")
    return await _trials_aggregates(queries, [trial_id])


async def aggregates_of_experiment(queries: Queries, experiment_id: int) -> list[str]:
    if await queries.events.experiment_owner(experiment_id) is None:
        raise NotFoundError(f"experiment {experiment_id} not found")
    trial_ids = await queries.trials.trial_ids(experiment_id)
    return [f"experiment/{experiment_id}", *await _trials_aggregates(queries, trial_ids)]


async def aggregates_of_allocation(queries: Queries, allocation_id: str) -> list[str]:
    if (
        await queries.events.allocation_trial(allocation_id) is None
        and await queries.events.task_of_allocation(allocation_id) is None
    ):
        raise NotFoundError(f"allocation {allocation_id} not found")
    return [f"allocation/{allocation_id}"]


async def aggregates_of_task(queries: Queries, task_id: str) -> list[str]:
    found = await queries.events.task(task_id)
    if found is None:
        raise NotFoundError(f"task {task_id} not found")
    return [f"allocation/{found[1]}"]


async def aggregates_of(queries: Queries, kind: str, key: str) -> list[str]:
    """The aggregates of one of SCOPE_KINDS (`key` as given: "7", "7.1", a task id)."""
    if kind == "experiment":
        return await aggregates_of_experiment(queries, _number(kind, key))
    if kind == "trial":
        return await aggregates_of_trial(queries, _number(kind, key))
    if kind == "allocation":
        return await aggregates_of_allocation(queries, key)
    return await aggregates_of_task(queries, key)


async def check_may_read(queries: Queries, kind: str, key: str) -> None:
    """PermissionDeniedError unless the caller is a user who is an admin or
    owns the experiment, trial, allocation or task (one of SCOPE_KINDS);
    NotFoundError when there is none."""
    user = require_user()
    if user.admin:
        return
    owner = await owner_of(queries, kind, key)
    if owner != user.username:
        raise PermissionDeniedError(
            f"{kind} {key} belongs to {owner}: only its owner or an admin may read its events,"
            f" and {user.username} is neither"
        )


async def owner_of(queries: Queries, kind: str, key: str) -> str:
    """Who owns an experiment, a trial, an allocation or a task; NotFoundError when there is none."""
    if kind == "task":
        owner, _ = _found(await queries.events.task(key), kind, key)
        return owner
    if kind == "allocation":
        task_id = await queries.events.task_of_allocation(key)
        if task_id is not None:
            return await owner_of(queries, "task", task_id)
        trial_id = await queries.events.allocation_trial(key)
        return await owner_of(queries, "trial", str(_found(trial_id, kind, key)))
    if kind == "trial":
        experiment_id = await queries.events.trial_experiment(_number(kind, key))
        return await owner_of(queries, "experiment", str(_found(experiment_id, kind, key)))
    return _found(await queries.events.experiment_owner(_number(kind, key)), kind, key)


@dataclass(frozen=True)
class Visibility:
    """Which events a user who is not an admin may read (see the module's docstring)."""

    username: str
    user_id: int
    owned: Owned

    def covers(self, envelope: Envelope) -> bool:
        if envelope.actor == f"user:{self.username}":
            return True
        kind, _, key = envelope.aggregate.partition("/")
        if kind == "experiment":
            return _in(key, self.owned.experiment_ids)
        if kind in TRIAL_KINDS:
            return _in(key, self.owned.trial_ids)
        if kind == "allocation":
            task = key.rpartition(".")[0]
            return _in(task, self.owned.trial_ids) or task in self.owned.task_ids
        if kind == "checkpoint":
            payload_type = envelope.WhichOneof("payload")
            experiment_id = getattr(envelope, payload_type).experiment_id if payload_type else 0
            return experiment_id in self.owned.experiment_ids
        return kind == "user" and key == str(self.user_id)


async def visibility(queries: Queries) -> Visibility | None:
    """What the caller may read of the whole log: None for an admin (everything)."""
    user = require_user()
    if user.admin:
        return None
    return Visibility(user.username, user.user_id, await queries.events.owned(user.username))


def _in(key: str, ids: frozenset[int]) -> bool:
    return key.isdigit() and int(key) in ids


def _number(kind: str, key: str) -> int:
    if not key.isdigit():
        raise NotFoundError(f"{kind} {key} not found")
    return int(key)


def _found(value: T | None, kind: str, key: str) -> T:
    if value is None:
        raise NotFoundError(f"{kind} {key} not found")
    return value


async def _trials_aggregates(queries: Queries, trial_ids: list[int]) -> list[str]:
    allocation_ids, checkpoint_uuids = await queries.events.trials_parts(trial_ids)
    return [
        *(f"{kind}/{trial_id}" for trial_id in trial_ids for kind in TRIAL_KINDS),
        *(f"allocation/{allocation_id}" for allocation_id in allocation_ids),
        *(f"checkpoint/{uuid}" for uuid in checkpoint_uuids),
    ]
