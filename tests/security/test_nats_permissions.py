"""Finding 8 of issue 17: every part could read the whole log (the bcrypt hashes
in user events among it), and one `agent` user, whose password every remote
agent held, could append for any agent.

Against a real local cluster of two agents: agent-1's own credentials (what
its part is given) cannot append agent-2's events or heartbeats, cannot read
user events by any consumer or single-message get, and an experiment still
runs to completion with every part's reading narrowed to what it folds (no
part of the cluster is refused anything: nats-server logs every refusal, and
the only ones are this test's)."""

import asyncio
import textwrap
from collections.abc import Iterator
from pathlib import Path

import nats
import nats.errors
import pytest
from support.e2e_cluster import Cluster, started_cluster, wait_for

from deploy.local.credentials import agent_user, credentials
from services.common.settings import inbox_prefix

pytestmark = pytest.mark.e2e

ATTACKER = agent_user("agent-1")

TRAIN_PY = textwrap.dedent(
    """
    import determined as det

    with det.core.init() as core_context:
        core_context.train.report_training_metrics(steps_completed=10, metrics={"loss": 0.5})
        core_context.train.report_validation_metrics(steps_completed=10, metrics={"validation_loss": 0.5})
    """
)

CONFIG_YAML = textwrap.dedent(
    """
    name: narrowed
    entrypoint: python3 train.py
    hyperparameters:
      global_batch_size: 32
    searcher:
      name: single
      metric: validation_loss
      max_length:
        batches: 10
    max_restarts: 0
    """
)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """Two agents; at the end, every refusal nats-server logged was this test's own."""
    with started_cluster("det-e2e-nats", ("--agents", "2"), attacker=ATTACKER) as running:
        yield running


async def attempts_as_agent_1(cluster: Cluster) -> tuple[list[str], list[str]]:
    """What agent-1's credentials try: (what was let through, nats-server's refusals)."""
    errors: list[str] = []

    async def keep(error: Exception) -> None:
        errors.append(str(error))

    password = credentials(cluster.data_dir).nats[ATTACKER].password
    client = await nats.connect(
        f"nats://127.0.0.1:{cluster.nats_port}",
        user=ATTACKER,
        password=password,
        inbox_prefix=inbox_prefix(ATTACKER),
        allow_reconnect=False,
        error_cb=keep,
    )
    js = client.jetstream(timeout=2)
    tries = {
        "append as agent-2": js.publish("det.events.agent.agent-2", b"forged", stream="EVENTS"),
        "read user events (named consumer)": js.add_consumer(
            "EVENTS", name="u1", filter_subject="det.events.user.>"
        ),
        "read user events (unnamed consumer)": js.add_consumer("EVENTS", filter_subject="det.events.user.>"),
        "read every event": js.add_consumer("EVENTS", name="all", filter_subject="det.events.>"),
        "get the admin's user event": js.get_last_msg("EVENTS", "det.events.user.1"),
        "get it directly": js.get_last_msg("EVENTS", "det.events.user.1", direct=True),
    }
    let_through = []
    try:
        for what, attempt in tries.items():
            try:
                await attempt
                let_through.append(what)
            except nats.errors.TimeoutError:
                pass
        await client.publish("det.heartbeats.agent-2", b"{}")  # a heartbeat for agent-2
        await client.flush()
        await asyncio.sleep(0.5)  # a refused publish is told asynchronously
    finally:
        await client.close()
    return let_through, [error for error in errors if "permissions violation" in error.lower()]


def test_an_agents_credentials_act_only_as_that_agent_and_read_no_user_event(cluster: Cluster) -> None:
    let_through, refusals = asyncio.run(attempts_as_agent_1(cluster))
    assert let_through == []
    assert len(refusals) == 7, refusals
    assert any("det.heartbeats.agent-2" in refusal for refusal in refusals)
    registered = wait_for(
        lambda: sorted(agent["agent_id"] for agent in cluster.json("agent", "list")) or [],
        "the agents to register",
    )
    assert registered == ["agent-1", "agent-2"]


def test_an_experiment_runs_to_completion_with_each_part_reading_what_it_folds(
    cluster: Cluster, tmp_path: Path
) -> None:
    (tmp_path / "train.py").write_text(TRAIN_PY)
    experiment_id = cluster.create(tmp_path, CONFIG_YAML)
    state = wait_for(
        lambda: s if (s := cluster.experiment_state(experiment_id)) in ("COMPLETED", "ERROR") else "",
        "the experiment to end",
        deadline_s=180,
    )
    assert state == "COMPLETED"
