"""What Determined 0.38.1's own client sends and requires of the REST API, without a cluster:
its model definition's file types, the fields its bindings require (`obj["..."]` in its
v1Experiment, v1ResourcePool, v1Job, v1Agent), the query of its `det e list`."""

import io
import tarfile

import pytest
from starlette.requests import Request

from determined.proto import api_pb2
from services.gateway.errors import InvalidArgumentError
from services.gateway.http import shapes
from services.gateway.http.client_routes import resource_pool
from services.gateway.http.model_definition import context_archive
from services.gateway.http.params import experiments_request

# The keys each of its bindings' from_json reads without a default.
EXPERIMENT_REQUIRED = {
    "archived", "config", "id", "jobId", "name", "numTrials", "originalConfig", "projectId",
    "projectOwnerId", "searcherType", "startTime", "state", "username",
}  # fmt: skip
POOL_REQUIRED = {
    "agentDockerImage", "agentDockerNetwork", "agentDockerRuntime", "agentFluentImage",
    "auxContainerCapacity", "auxContainerCapacityPerAgent", "auxContainersRunning", "clusterName",
    "containerStartupScript", "defaultAuxPool", "defaultComputePool", "description", "details",
    "imageId", "instanceType", "location", "masterCertName", "masterUrl", "maxAgentStartingPeriod",
    "maxAgents", "maxIdleAgentPeriod", "minAgents", "name", "numAgents", "preemptible",
    "resourceManagerMetadata", "schedulerFittingPolicy", "schedulerType", "slotType", "slotsAvailable",
    "slotsUsed", "startupScript", "type",
}  # fmt: skip
JOB_REQUIRED = {
    "allocatedSlots", "entityId", "isPreemptible", "jobId", "name", "requestedSlots", "resourcePool",
    "submissionTime", "type", "username", "workspaceId",
}  # fmt: skip


def query(text: str) -> Request:
    return Request(
        {"type": "http", "method": "GET", "path": "/", "query_string": text.encode(), "headers": []}
    )


def test_its_model_definition_file_types_are_taken() -> None:
    """0.38's client sends v1File.type as the tar header's type byte: 53 a folder, 48 a file."""
    files = [
        {"path": "pkg", "type": 53, "content": "", "mode": 0o755, "mtime": 1, "uid": 0, "gid": 0},
        {"path": "pkg/a.py", "type": 48, "content": "cHJpbnQoMSk=", "mode": 0o644, "mtime": 1},
    ]
    with tarfile.open(fileobj=io.BytesIO(context_archive(files))) as tar:
        assert tar.getmember("pkg").isdir() and tar.getmember("pkg/a.py").isfile()
        assert tar.extractfile("pkg/a.py").read() == b"print(1)"  # type: ignore[union-attr]
    with pytest.raises(InvalidArgumentError, match="type must be"):
        context_archive([{"path": "x", "type": 50, "content": ""}])  # a symbolic link's


def test_an_experiment_has_every_field_its_client_requires() -> None:
    shown = shapes.experiment(
        api_pb2.Experiment(id=3, state="ACTIVE", config_json='{"hyperparameters": {"lr": 0.1}}', parent_id=2)
    )
    assert set(shown) >= EXPERIMENT_REQUIRED
    assert (shown["state"], shown["forkedFrom"], shown["hyperparameters"]) == ("STATE_ACTIVE", 2, {"lr": 0.1})
    assert set(shapes.experiment(api_pb2.Experiment())) >= EXPERIMENT_REQUIRED  # validateOnly's answer


def test_a_pool_counts_its_agents_slots_and_jobs() -> None:
    agent = api_pb2.Agent(agent_id="a", resource_pool="gpus")
    for slot_id in range(2):
        agent.slots.add(slot_id=slot_id, type="cpu")
    agent.slot_uses.add(slot_id=0, allocation_id="1.1")
    jobs = api_pb2.GetJobsResponse(schedulers={"gpus": "priority"})
    jobs.jobs.add(job_id="experiment/1", resource_pool="gpus", state="SCHEDULED")
    jobs.jobs.add(job_id="experiment/2", resource_pool="gpus", state="QUEUED")
    jobs.jobs.add(job_id="experiment/3", resource_pool="other", state="QUEUED")
    pool = resource_pool("gpus", False, jobs, [agent], "c")
    assert set(pool) >= POOL_REQUIRED
    assert (pool["numAgents"], pool["slotsAvailable"], pool["slotsUsed"]) == (1, 2, 1)
    assert (pool["schedulerType"], pool["slotType"]) == ("SCHEDULER_TYPE_PRIORITY", "TYPE_CPU")
    assert pool["stats"] == {"queuedCount": 1, "scheduledCount": 1}
    empty = resource_pool("default", True, api_pb2.GetJobsResponse(), [agent], "c")
    assert (empty["numAgents"], empty["slotType"], empty["schedulerType"]) == (
        0,
        "TYPE_UNSPECIFIED",
        "SCHEDULER_TYPE_FAIR_SHARE",
    )


def test_a_job_and_an_agent_have_what_its_client_requires() -> None:
    job = shapes.job(api_pb2.Job(job_id="task/t", type="TASK"), "NOTEBOOK")
    assert set(job) >= JOB_REQUIRED and job["type"] == "TYPE_NOTEBOOK"
    assert shapes.job(api_pb2.Job(job_id="experiment/1", type="EXPERIMENT"))["type"] == "TYPE_EXPERIMENT"
    agent = api_pb2.Agent(agent_id="a", state="ENABLED")
    agent.slots.add(slot_id=0, type="cpu", device="cpu0")
    agent.slots.add(slot_id=1, type="cpu", device="cpu1")
    agent.slot_uses.add(slot_id=1, allocation_id="4.1", trial_id=4)
    shown = shapes.agent(agent)
    assert shown["slotStats"]["typeStats"]["TYPE_CPU"]["total"] == 2
    assert set(shown["slotStats"]["brandStats"]) == {"cpu0", "cpu1"}
    assert list(shown["containers"]) == ["4.1"]


def test_its_experiment_list_query_is_read() -> None:
    """`det e list` asks archived=false and its own user; --all asks neither."""
    asked = experiments_request(query("archived=false&users=admin&limit=200&offset=0"))
    assert asked.HasField("archived") and not asked.archived
    assert (list(asked.users), asked.limit) == (["admin"], 200)
    every = experiments_request(query("states=STATE_ACTIVE,STATE_PAUSED&labels=a&sortBy=SORT_BY_USER"))
    assert not every.HasField("archived")
    assert (list(every.states), list(every.labels), every.sort_by) == (
        ["STATE_ACTIVE", "STATE_PAUSED"],
        ["a"],
        "owner",
    )
    for bad in ("limit=100000", "offset=99999999999", "archived=maybe", "sortBy=SORT_BY_COLOUR"):
        with pytest.raises(InvalidArgumentError):
            experiments_request(query(bad))
