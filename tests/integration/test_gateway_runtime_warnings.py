"""The gateway against a real nats-server and PostgreSQL: an agent's runtime in `det agent list`,
and `det experiment create` warning, naming the key, about what the agents of the experiment's
pool cannot give it (decided from the read models alone)."""

import json
from pathlib import Path

import test_gateway
from test_gateway_agents_jobs import append
from test_gateway_metrics_contexts import det

from determined.proto import api_pb2, api_pb2_grpc, events_pb2
from services.common.eventstore import EventStore
from services.gateway.server import Gateway

gateway = test_gateway.gateway

ASKS_FOR_A_CONTAINER = """
entrypoint: python3 train.py
searcher: {name: single, metric: loss}
environment:
  image: team/train:1.2
  pod_spec: {spec: {priorityClassName: high}}
bind_mounts: [{host_path: /data, container_path: /data, read_only: true}]
"""
HINT = "trials as processes (cluster-up --runtime docker runs them in containers)"
POD_SPEC = "environment.pod_spec is not used: only Determined on Kubernetes honours it"


async def register(store: EventStore, gateway: Gateway, agent_id: str, pool: str, runtime: str) -> None:
    payload = events_pb2.AgentRegistered(
        agent_id=agent_id,
        hostname=agent_id,
        resource_pool=pool,
        runtime=runtime,
        slots=[events_pb2.Slot(slot_id=0, type="cpu", device="cpu0")],
    )
    await append(store, gateway, f"agent/{agent_id}", payload, f"register-{agent_id}")


async def test_create_warns_about_what_the_pools_agents_cannot_give(
    api: api_pb2_grpc.DeterminedStub, event_store: EventStore, gateway: Gateway, tmp_path: Path
) -> None:
    # An agent that registered before runtimes: a process agent.
    await register(event_store, gateway, "old-agent", "", "")
    await register(event_store, gateway, "boxed", "containers", "docker")

    code, out, _ = await det(gateway, "agent", "list", "--json")
    assert code == 0
    assert {agent["agent_id"]: agent["runtime"] for agent in json.loads(out)} == {
        "old-agent": "process",
        "boxed": "docker",
    }
    code, out, _ = await det(gateway, "agent", "list")
    header, _, boxed, old = out.splitlines()  # sorted by agent id
    assert (header.split()[-1], boxed.split()[-1], old.split()[-1]) == ("Runtime", "docker", "process")

    default_pool = await api.CreateExperiment(
        api_pb2.CreateExperimentRequest(config_yaml=ASKS_FOR_A_CONTAINER, validate_only=True)
    )
    assert list(default_pool.warnings) == [
        f"environment.image 'team/train:1.2' is not used: the agents of pool 'default' run {HINT}",
        f"bind_mounts is not used: the agents of pool 'default' run {HINT}",
        POD_SPEC,
    ]
    in_containers = ASKS_FOR_A_CONTAINER + "resources: {resource_pool: containers}\n"
    containers_pool = await api.CreateExperiment(
        api_pb2.CreateExperimentRequest(config_yaml=in_containers, validate_only=True)
    )
    assert list(containers_pool.warnings) == [POD_SPEC]

    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "train.py").write_text("print('hi')\n")
    (tmp_path / "const.yaml").write_text(ASKS_FOR_A_CONTAINER)
    code, out, error = await det(gateway, "e", "create", "const.yaml", "model", cwd=tmp_path)
    assert code == 0 and out.splitlines()[-1] == "Created experiment 1", error
    assert (
        f"warning: environment.image 'team/train:1.2' is not used: the agents of pool 'default' run {HINT}"
        in (error.splitlines())
    )
    assert f"warning: {POD_SPEC}" in error.splitlines()
