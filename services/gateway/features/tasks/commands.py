"""Task commands turned into events (pure): what a LaunchTask or a KillTask
asks, checked, and the Appends that record it. The shell (service.py) hands
in what is not pure: the task id, the rows of the trials a TensorBoard shows.

A task is one AllocationRequested on its allocation's aggregate
("allocation/<task id>.1"), message id `task-<task id>`; a client's request
id makes the task id (a UUID derived from the owner and the request id), so a
retried LaunchTask appends at most once and answers with the first task. A
kill's message id is the trials' (`allocation-kill-<allocation id>`): a
repeated kill is stored once.
"""

import json
import random
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from determined.common import expconf
from determined.common.limits import MAX_COMMAND_BYTES, MAX_TENSORBOARD_TRIALS
from determined.common.petname import petname
from determined.common.ssh_keys import public_key_problem
from determined.common.states import TaskState, TaskType
from determined.proto import api_pb2, events_pb2
from services.common.envelope import Append, aggregate
from services.gateway.errors import InvalidArgumentError, PermissionDeniedError
from services.gateway.features.commands import Unchanged

# The ids of tasks started with a request id: uuid5(this, "<owner>/<request id>").
_REQUEST_NAMESPACE = uuid.UUID("8f6a4d0e-2b1c-5e3a-9d47-6c1b2a3f4e5d")
# What Determined calls each kind in a task's default description.
_KIND_NAMES = {
    TaskType.NOTEBOOK: "JupyterLab",
    TaskType.TENSORBOARD: "TensorBoard",
    TaskType.COMMAND: "Command",
    TaskType.SHELL: "Shell",
}
# An OpenSSH public key line: its type, base64 key and an optional comment, on one line.


@dataclass(frozen=True)
class TaskRequest:
    """A LaunchTask's request, checked (`checked_request`)."""

    task_type: TaskType
    config: expconf.TaskConfig
    config_json: str
    command: tuple[str, ...]
    experiment_ids: tuple[int, ...]
    trial_ids: tuple[int, ...]
    shell_public_key: str


@dataclass(frozen=True)
class SourceTrial:
    """A trial a TensorBoard may show, as the read models know it."""

    experiment_id: int
    trial_id: int
    # Its experiment's checkpoint_storage section (JSON).
    storage_json: str


def checked_task_type(task_type: str) -> TaskType:
    if task_type not in _KIND_NAMES:
        raise InvalidArgumentError(f"task_type {task_type[:40]!r} is not one of {', '.join(_KIND_NAMES)}")
    return TaskType(task_type)


def checked_request(request: api_pb2.LaunchTaskRequest) -> TaskRequest:
    """The request's parts, each checked against what its kind takes, or
    InvalidArgumentError naming what is wrong. Validating the config is
    CPU-bound on a config at the limits: service.py runs this in a worker thread."""
    task_type = checked_task_type(request.task_type)
    try:
        config = expconf.load_task_config(request.config_yaml, task_type)
    except expconf.InvalidConfigError as error:
        raise InvalidArgumentError("invalid task config:\n" + "\n".join(error.errors)) from error
    return TaskRequest(
        task_type=task_type,
        config=config,
        config_json=json.dumps(config.to_json_dict(), sort_keys=True),
        command=checked_command(task_type, request.command, config),
        experiment_ids=_checked_ids(task_type, "experiment_ids", request.experiment_ids),
        trial_ids=_checked_ids(task_type, "trial_ids", request.trial_ids),
        shell_public_key=checked_public_key(task_type, request.shell_public_key),
    )


def checked_command(
    task_type: TaskType, command: Sequence[str], config: expconf.TaskConfig
) -> tuple[str, ...]:
    """A command's command line (else its config's entrypoint), at most
    MAX_COMMAND_BYTES; the other kinds take none."""
    if task_type != TaskType.COMMAND:
        if command:
            raise InvalidArgumentError(f"command is for commands only, not a {task_type}")
        return ()
    if not command and config.entrypoint is not None:
        entrypoint = config.entrypoint
        command = [entrypoint] if isinstance(entrypoint, str) else entrypoint
    if not command or not any(argument.strip() for argument in command):
        raise InvalidArgumentError("a command needs a command line to run (det cmd run CMD...)")
    size = sum(len(argument.encode()) + 1 for argument in command)
    if size > MAX_COMMAND_BYTES:
        raise InvalidArgumentError(
            f"the command line is {size} bytes; at most {MAX_COMMAND_BYTES} bytes is allowed"
        )
    if any("\x00" in argument for argument in command):
        raise InvalidArgumentError("the command line must not hold a NUL character")
    return tuple(command)


def _checked_ids(task_type: TaskType, what: str, ids: Sequence[int]) -> tuple[int, ...]:
    if ids and task_type != TaskType.TENSORBOARD:
        raise InvalidArgumentError(f"{what} are for TensorBoards only, not a {task_type}")
    if len(ids) > MAX_TENSORBOARD_TRIALS:
        raise InvalidArgumentError(
            f"{what} names {len(ids)} ids; at most {MAX_TENSORBOARD_TRIALS} are allowed"
        )
    bad = [i for i in ids if i < 1]
    if bad:
        raise InvalidArgumentError(f"{what}: {bad[0]} is not an id (ids start at 1)")
    return tuple(dict.fromkeys(ids))


def checked_public_key(task_type: TaskType, key: str) -> str:
    """A shell's OpenSSH public key line (required); the other kinds take none."""
    if task_type != TaskType.SHELL:
        if key:
            raise InvalidArgumentError(f"shell_public_key is for shells only, not a {task_type}")
        return ""
    key = key.strip()
    if not key:
        raise InvalidArgumentError("a shell needs shell_public_key: the OpenSSH public key that may log in")
    problem = public_key_problem(key)
    if problem:
        raise InvalidArgumentError(f"shell_public_key {problem}")
    return key


def tensorboard_sources(
    request: TaskRequest, found: Sequence[SourceTrial], known_experiments: set[int]
) -> tuple[list[events_pb2.TensorboardSource], list[str]]:
    """A TensorBoard's trials: every trial of the experiments it names and the
    trials it names (`found`: those the read models hold of either, in order;
    `known_experiments`: the named experiments that exist), and warnings (an
    experiment with no trial yet). InvalidArgumentError for a TensorBoard that
    names nothing, an unknown id, or past MAX_TENSORBOARD_TRIALS trials."""
    if request.task_type != TaskType.TENSORBOARD:
        return [], []
    if not request.experiment_ids and not request.trial_ids:
        raise InvalidArgumentError("a TensorBoard needs experiment_ids or trial_ids to show")
    unknown = [i for i in request.experiment_ids if i not in known_experiments]
    if unknown:
        raise InvalidArgumentError(f"experiment {unknown[0]} not found")
    found_trials = {trial.trial_id for trial in found}
    missing = [i for i in request.trial_ids if i not in found_trials]
    if missing:
        raise InvalidArgumentError(f"trial {missing[0]} not found")
    if len(found) > MAX_TENSORBOARD_TRIALS:
        raise InvalidArgumentError(
            f"the TensorBoard would show {len(found)} trials; at most {MAX_TENSORBOARD_TRIALS} are allowed"
            " (name fewer experiments, or trials with -t)"
        )
    with_trials = {trial.experiment_id for trial in found}
    warnings = [
        f"experiment {i} has no trials yet: the TensorBoard shows none of it"
        for i in request.experiment_ids
        if i not in with_trials
    ]
    sources = [
        events_pb2.TensorboardSource(
            experiment_id=trial.experiment_id, trial_id=trial.trial_id, storage_json=trial.storage_json
        )
        for trial in found
    ]
    return sources, warnings


def checked_task_id(task_id: str) -> str:
    """A task's id: a UUID as the gateway wrote it."""
    try:
        if str(uuid.UUID(task_id)) == task_id:
            return task_id
    except ValueError:
        pass
    raise InvalidArgumentError(f"task_id {task_id[:80]!r} is not a task id (a UUID such as 6f1c...-...)")


def check_owner_or_admin(task: api_pb2.Task, username: str, *, admin: bool, what: str) -> None:
    """Only a task's owner or an admin may kill it or read its logs."""
    if username != task.owner and not admin:
        raise PermissionDeniedError(
            f"task {task.id} belongs to {task.owner}: only its owner or an admin may {what},"
            f" and {username} is neither"
        )


def task_id_of_request(owner: str, request_id: str) -> str:
    """The id of the task a request id starts (the same for a retry)."""
    return str(uuid.uuid5(_REQUEST_NAMESPACE, f"{owner}/{request_id}"))


def default_description(task_type: TaskType, task_id: str) -> str:
    """Determined's form, "JupyterLab (<petname>)", the petname drawn from the task id."""
    return f"{_KIND_NAMES[task_type]} ({petname(random.Random(task_id))})"


def task_launched(
    task_id: str,
    request: TaskRequest,
    *,
    owner: str,
    context_hash: str,
    sources: Sequence[events_pb2.TensorboardSource],
) -> Append:
    """The task's one AllocationRequested: not preemptible, its own job."""
    allocation_id = f"{task_id}.1"
    resources = request.config.resources
    launch = events_pb2.TaskLaunch(
        description=request.config.description or default_description(request.task_type, task_id),
        config_json=request.config_json,
        context_hash=context_hash,
        command=request.command,
        tensorboard_sources=sources,
        shell_public_key=request.shell_public_key,
    )
    event = events_pb2.AllocationRequested(
        allocation_id=allocation_id,
        task_id=task_id,
        task_type=request.task_type,
        slots=request.config.slots,
        resource_pool=resources.resource_pool,
        job_id=aggregate("task", task_id),
        weight=resources.weight,
        priority=resources.priority or 0,
        preemptible=False,
        owner=owner,
        task=launch,
    )
    return Append(aggregate("allocation", allocation_id), event, f"task-{task_id}", expected_version=0)


def kill_requested(task: api_pb2.Task, killer: str) -> Append | Unchanged:
    """The kill of a task that has not ended, or Unchanged when it has or is
    being killed already."""
    if task.state == TaskState.TERMINATED:
        return Unchanged(f"Task {task.id} has ended already ({task.exit_reason}): nothing to kill")
    if task.state == TaskState.TERMINATING:
        return Unchanged(f"Task {task.id} is being killed already")
    event = events_pb2.AllocationKillRequested(
        allocation_id=task.allocation_id, task_id=task.id, reason=f"killed by {killer}"
    )
    return Append(aggregate("allocation", task.allocation_id), event, f"allocation-kill-{task.allocation_id}")
