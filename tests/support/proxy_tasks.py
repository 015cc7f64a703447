"""Tasks as the proxy tests see them: one appended as the gateway, the scheduler and an agent
would have (AllocationRequested with a TaskLaunch, AllocationAssigned, AllocationStarted,
AllocationReady with the address of a server standing for the task's), and HTTP logins."""

import uuid

import httpx
from google.protobuf.message import Message

from determined.common.passwords import salted_hash
from determined.proto import events_pb2
from services.common.envelope import Append
from services.common.eventstore import EventStore
from services.gateway.server import Gateway


async def login(http: httpx.AsyncClient, username: str, password: str) -> str:
    answer = await http.post(
        "/api/v1/auth/login", json={"username": username, "password": salted_hash(password), "isHashed": True}
    )
    assert answer.status_code == 200, answer.text
    return str(answer.json()["token"])


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


async def given_task(
    store: EventStore,
    gateway: Gateway,
    task_type: str,
    *,
    ready_at: str = "",
    started: bool = True,
    exit_code: int | None = None,
    task_id: str = "",
    config_json: str = "{}",
) -> str:
    """alice's task (a new id unless given), as the gateway, the scheduler and an agent
    would have appended its events."""
    task_id = task_id or str(uuid.uuid4())
    allocation_id = f"{task_id}.1"
    aggregate = f"allocation/{allocation_id}"
    requested = events_pb2.AllocationRequested(
        allocation_id=allocation_id,
        task_id=task_id,
        task_type=task_type,
        slots=1,
        job_id=f"task/{task_id}",
        owner="alice",
        task=events_pb2.TaskLaunch(description=f"a {task_type.lower()}", config_json=config_json),
    )
    payloads: list[tuple[Message, str]] = [
        (requested, "requested"),
        (
            events_pb2.AllocationAssigned(allocation_id=allocation_id, task_id=task_id, agent_id="agent-1"),
            "assigned",
        ),
    ]
    if started:
        payloads.append(
            (events_pb2.AllocationStarted(allocation_id=allocation_id, agent_id="agent-1"), "started")
        )
    if ready_at:
        ready = events_pb2.AllocationReady(
            allocation_id=allocation_id, task_id=task_id, agent_id="agent-1", proxy_address=ready_at
        )
        payloads.append((ready, "ready"))
    if exit_code is not None:
        payloads.append(
            (events_pb2.AllocationExited(allocation_id=allocation_id, exit_code=exit_code), "exited")
        )
    for payload, step in payloads:
        await store.append(Append(aggregate, payload, f"{allocation_id}-{step}"), actor="service:test")
    assert await gateway.projector.catch_up()
    return task_id
