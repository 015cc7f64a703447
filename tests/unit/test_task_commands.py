"""LaunchTask, KillTask and a task's UpdateJob turned into events (pure):
what each kind takes, the limits, the one AllocationRequested a task is,
its kill, and its job's changes (on its allocation's aggregate)."""

import json
from typing import Any

import pytest

from determined.common.limits import MAX_COMMAND_BYTES, MAX_PUBLIC_KEY_BYTES, MAX_TENSORBOARD_TRIALS
from determined.common.states import TaskType
from determined.proto import api_pb2, events_pb2
from services.common import wellformed
from services.common.envelope import Append, wrap
from services.gateway.errors import InvalidArgumentError, PermissionDeniedError
from services.gateway.features.commands import Unchanged
from services.gateway.features.jobs import commands as job_commands
from services.gateway.features.jobs.commands import JobResources
from services.gateway.features.tasks import commands
from services.gateway.features.tasks.commands import SourceTrial

TASK = "6f1c2d3e-4a5b-4c6d-8e7f-a1b2c3d4e5f6"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGx0 alice@laptop"


def request(task_type: str, **fields: Any) -> api_pb2.LaunchTaskRequest:
    return api_pb2.LaunchTaskRequest(task_type=task_type, **fields)


def refused(**fields: Any) -> str:
    with pytest.raises(InvalidArgumentError) as raised:
        commands.checked_request(request(**fields))
    return str(raised.value)


def test_a_notebook_with_the_defaults() -> None:
    checked = commands.checked_request(request("NOTEBOOK"))
    assert (checked.task_type, checked.config.slots, checked.command, checked.shell_public_key) == (
        "NOTEBOOK",
        1,
        (),
        "",
    )
    assert json.loads(checked.config_json)["resources"]["slots"] == 1


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"task_type": "TRIAL"}, "task_type 'TRIAL' is not one of NOTEBOOK, TENSORBOARD, COMMAND, SHELL"),
        ({"task_type": ""}, "task_type '' is not one of"),
        ({"task_type": "NOTEBOOK", "config_yaml": "foo: 1"}, 'invalid task config:\nunknown field "foo" at top level'),
        ({"task_type": "NOTEBOOK", "command": ["ls"]}, "command is for commands only, not a NOTEBOOK"),
        ({"task_type": "COMMAND"}, "a command needs a command line to run"),
        ({"task_type": "COMMAND", "command": [" ", ""]}, "a command needs a command line to run"),
        ({"task_type": "COMMAND", "command": ["a\x00b"]}, "the command line must not hold a NUL character"),
        ({"task_type": "COMMAND", "command": ["x" * MAX_COMMAND_BYTES]}, f"at most {MAX_COMMAND_BYTES} bytes"),
        ({"task_type": "SHELL"}, "a shell needs shell_public_key"),
        ({"task_type": "SHELL", "shell_public_key": "not a key"}, "shell_public_key is not an OpenSSH public key line"),
        ({"task_type": "SHELL", "shell_public_key": KEY + "\nssh-rsa AAAA"}, "shell_public_key is not one line"),
        ({"task_type": "SHELL", "shell_public_key": KEY + "x" * MAX_PUBLIC_KEY_BYTES}, "shell_public_key is over"),
        ({"task_type": "COMMAND", "command": ["ls"], "shell_public_key": KEY}, "shell_public_key is for shells only"),
        ({"task_type": "NOTEBOOK", "experiment_ids": [1]}, "experiment_ids are for TensorBoards only, not a NOTEBOOK"),
        ({"task_type": "TENSORBOARD", "trial_ids": [0]}, "trial_ids: 0 is not an id"),
        ({"task_type": "TENSORBOARD", "experiment_ids": list(range(1, MAX_TENSORBOARD_TRIALS + 2))},
         f"at most {MAX_TENSORBOARD_TRIALS} are allowed"),
    ],
)  # fmt: skip
def test_what_each_kind_refuses(fields: dict[str, Any], message: str) -> None:
    assert message in refused(**fields)


def test_a_command_runs_its_command_line_else_its_entrypoint() -> None:
    assert commands.checked_request(request("COMMAND", command=["echo", "hi"])).command == ("echo", "hi")
    from_config = commands.checked_request(request("COMMAND", config_yaml="entrypoint: echo hi; exit 3"))
    assert from_config.command == ("echo hi; exit 3",)
    both = commands.checked_request(request("COMMAND", command=["ls"], config_yaml="entrypoint: [pwd]"))
    assert both.command == ("ls",)


def test_a_shells_key_is_kept_without_its_surrounding_blanks() -> None:
    assert commands.checked_request(request("SHELL", shell_public_key=f"  {KEY}\n")).shell_public_key == KEY


def tensorboard(**fields: Any) -> commands.TaskRequest:
    return commands.checked_request(request("TENSORBOARD", **fields))


def test_a_tensorboards_trials_and_their_storage() -> None:
    found = [
        SourceTrial(3, 7, '{"type": "shared_fs"}'),
        SourceTrial(3, 8, '{"type": "shared_fs"}'),
        SourceTrial(4, 9, "{}"),
    ]
    sources, warnings = commands.tensorboard_sources(
        tensorboard(experiment_ids=[3, 5], trial_ids=[9]), found, {3, 5}
    )
    assert [(s.experiment_id, s.trial_id, s.storage_json) for s in sources] == [
        (3, 7, '{"type": "shared_fs"}'),
        (3, 8, '{"type": "shared_fs"}'),
        (4, 9, "{}"),
    ]
    assert warnings == ["experiment 5 has no trials yet: the TensorBoard shows none of it"]


@pytest.mark.parametrize(
    ("fields", "found", "known", "message"),
    [
        ({}, [], set(), "a TensorBoard needs experiment_ids or trial_ids to show"),
        ({"experiment_ids": [3]}, [], set(), "experiment 3 not found"),
        ({"trial_ids": [8]}, [SourceTrial(3, 7, "{}")], set(), "trial 8 not found"),
        ({"experiment_ids": [3]}, [SourceTrial(3, t, "{}") for t in range(1, MAX_TENSORBOARD_TRIALS + 2)], {3},
         f"the TensorBoard would show {MAX_TENSORBOARD_TRIALS + 1} trials; at most {MAX_TENSORBOARD_TRIALS}"),
    ],
)  # fmt: skip
def test_what_a_tensorboard_refuses(
    fields: dict[str, Any], found: list[SourceTrial], known: set[int], message: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        commands.tensorboard_sources(tensorboard(**fields), found, known)


def test_other_kinds_show_no_trials() -> None:
    assert commands.tensorboard_sources(commands.checked_request(request("NOTEBOOK")), [], set()) == ([], [])


def test_a_task_is_one_allocation_request_of_its_own_job() -> None:
    checked = commands.checked_request(
        request("NOTEBOOK", config_yaml="resources: {slots: 2, resource_pool: gpu, priority: 5, weight: 3}")
    )
    append = commands.task_launched(TASK, checked, owner="alice", context_hash="c" * 64, sources=[])
    event = append.payload
    assert (append.aggregate, append.msg_id, append.expected_version) == (
        f"allocation/{TASK}.1",
        f"task-{TASK}",
        0,
    )
    assert (event.allocation_id, event.task_id, event.task_type, event.job_id, event.owner) == (
        f"{TASK}.1",
        TASK,
        "NOTEBOOK",
        f"task/{TASK}",
        "alice",
    )
    assert (event.slots, event.resource_pool, event.priority, event.weight, event.preemptible) == (
        2,
        "gpu",
        5,
        3.0,
        False,
    )
    assert (event.task.context_hash, event.task.config_json) == ("c" * 64, checked.config_json)
    assert event.task.description.startswith("JupyterLab (")
    assert wellformed.problem(wrap(append, actor="user:alice", occurred_at_ns=1)) is None


def test_the_default_description_is_the_kinds_and_the_same_for_a_task() -> None:
    names = [commands.default_description(kind, TASK) for kind in TaskType]
    assert [name.split(" (")[0] for name in names] == ["JupyterLab", "TensorBoard", "Command", "Shell"]
    assert commands.default_description(TaskType.NOTEBOOK, TASK) == names[0]
    described = commands.checked_request(
        request("SHELL", shell_public_key=KEY, config_yaml="description: mine")
    )
    launched = commands.task_launched(TASK, described, owner="a", context_hash="", sources=[])
    assert launched.payload.task.description == "mine"


def test_a_request_id_makes_the_same_task_id_for_its_user_only() -> None:
    first = commands.task_id_of_request("alice", "r1")
    assert commands.checked_task_id(first) == first == commands.task_id_of_request("alice", "r1")
    assert first != commands.task_id_of_request("bob", "r1") != commands.task_id_of_request("alice", "r2")


@pytest.mark.parametrize("bad", ["", "12", TASK.upper(), "{" + TASK + "}", TASK + "x", "x" * 10_000])
def test_what_is_no_task_id(bad: str) -> None:
    with pytest.raises(InvalidArgumentError, match="is not a task id"):
        commands.checked_task_id(bad)


def task(state: str, **fields: Any) -> api_pb2.Task:
    return api_pb2.Task(id=TASK, owner="alice", state=state, allocation_id=f"{TASK}.1", **fields)


@pytest.mark.parametrize("state", ["PENDING", "ASSIGNED", "STARTING", "RUNNING"])
def test_a_kill_names_who_killed(state: str) -> None:
    append = commands.kill_requested(task(state), "bob")
    assert not isinstance(append, Unchanged)
    assert (append.aggregate, append.msg_id, append.payload.reason, append.payload.task_id) == (
        f"allocation/{TASK}.1",
        f"allocation-kill-{TASK}.1",
        "killed by bob",
        TASK,
    )


def test_a_kill_of_an_ended_or_dying_task_changes_nothing() -> None:
    assert commands.kill_requested(task("TERMINATED", exit_reason="exited with code 0"), "bob") == Unchanged(
        f"Task {TASK} has ended already (exited with code 0): nothing to kill"
    )
    assert commands.kill_requested(task("TERMINATING"), "bob") == Unchanged(
        f"Task {TASK} is being killed already"
    )


def test_only_the_owner_or_an_admin() -> None:
    commands.check_owner_or_admin(task("RUNNING"), "alice", admin=False, what="kill it")
    commands.check_owner_or_admin(task("RUNNING"), "root", admin=True, what="kill it")
    with pytest.raises(
        PermissionDeniedError,
        match=f"task {TASK} belongs to alice: only its owner or an admin may kill it, and mallory is neither",
    ):
        commands.check_owner_or_admin(task("RUNNING"), "mallory", admin=False, what="kill it")


CURRENT = JobResources(priority=42, weight=1.0, max_slots=0)


def test_a_tasks_job_change_goes_on_its_allocation() -> None:
    append = job_commands.task_job_changed(TASK, api_pb2.UpdateJobRequest(priority=5), CURRENT, "alice", 3)
    assert not isinstance(append, Unchanged)
    assert (append.aggregate, append.expected_version, append.payload.job_id, append.payload.priority) == (
        f"allocation/{TASK}.1",
        3,
        f"task/{TASK}",
        5,
    )
    assert append.msg_id.startswith(f"job-resources-{TASK}-3-")
    assert wellformed.problem(wrap(append, actor="user:alice", occurred_at_ns=1)) is None
    same = job_commands.task_job_changed(TASK, api_pb2.UpdateJobRequest(priority=42), CURRENT, "alice", 3)
    assert same == Unchanged(f"Job task/{TASK} has these values already: nothing to change")
    with pytest.raises(InvalidArgumentError, match="max_slots is for experiments' jobs"):
        job_commands.task_job_changed(TASK, api_pb2.UpdateJobRequest(max_slots=2), CURRENT, "alice", 3)


@pytest.mark.parametrize(
    ("job_id", "aggregate", "problem"),
    [
        (f"task/{TASK}", f"experiment/{TASK}.1", "its kind must be 'allocation'"),
        (f"task/{TASK}", "allocation/other.1", f"names {TASK}.1 id in its payload"),
        ("experiment/7", "allocation/7", "its kind must be 'experiment'"),
        ("trial/7", "experiment/7", "names no id in its payload"),
    ],
)
def test_a_job_change_is_read_only_on_its_jobs_own_aggregate(
    job_id: str, aggregate: str, problem: str
) -> None:
    change = events_pb2.JobResourcesChanged(job_id=job_id, priority=5)
    found = wellformed.problem(wrap(Append(aggregate, change, "m"), actor="user:a", occurred_at_ns=1))
    assert found is not None and problem in found


def test_task_of_job() -> None:
    assert job_commands.task_of_job(f" task/{TASK} ") == TASK
    assert job_commands.task_of_job("experiment/7") is job_commands.task_of_job("7") is None
