"""A 4-slot trial on 2 agents x 2 CPU slots (issue 8), end to end: `examples/distributed`
started by `python3 -m determined.launch.torch_distributed`, one torch worker per slot
(gloo), the gang spread over two real agent processes.

- the workers' DistributedContext.allgather returns every rank's value (the chief logs it
  and reports the number of workers), only the chief reports, and `det trial logs --rank 1`
  shows rank 1's lines only;
- a worker that exits 1 on the second agent fails the whole gang: the trial ends ERROR
  with `max_restarts: 0`, and the workers still waiting on the first agent are killed.
"""

import json
import shutil
import subprocess
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.chaos_checks import training_steps
from support.e2e_cluster import Cluster, det, wait_for

pytestmark = pytest.mark.e2e

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "distributed"
STEPS = 40  # examples/distributed/train_ddp.py's STEPS


class TwoAgents(Cluster):
    """A local cluster with 2 agents of 2 CPU slots each: no single agent holds 4."""

    def up(self) -> subprocess.CompletedProcess[str]:
        return det(
            self.env, "deploy", "local", "cluster-up", "--data-dir", str(self.data_dir), "--no-gpu",
            "--agents", "2", "--cpu-slots", "2",
            "--master-port", str(self.master_port), "--nats-port", str(self.nats_port),
            "--postgres-port", str(self.postgres_port),
        )  # fmt: skip


@pytest.fixture(scope="module")
def cluster() -> Iterator[TwoAgents]:
    running = TwoAgents(Path("/tmp") / f"det-e2e-dist-{uuid.uuid4().hex[:8]}")
    started = running.up()
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        wait_for(lambda: len(running.json("agent", "list")) == 2, "both agents to register")
        yield running
    finally:
        running.down()
        shutil.rmtree(running.data_dir, ignore_errors=True)


def example_config(name: str, script: str = "train_ddp.py") -> str:
    """examples/distributed/distributed.yaml, its launcher running `script`."""
    document = yaml.safe_load((EXAMPLE / "distributed.yaml").read_text())
    document["name"] = name
    document["entrypoint"] = document["entrypoint"].replace("train_ddp.py", script)
    return json.dumps(document)


def only_trial(cluster: Cluster, experiment_id: int) -> int:
    [trial] = wait_for(lambda: cluster.trials(experiment_id), "the trial")
    return int(trial["id"])


def wait_until_ended(cluster: Cluster, experiment_id: int, deadline_s: float = 150) -> str:
    return str(
        wait_for(
            lambda: (
                (state := cluster.experiment_state(experiment_id)) in ("COMPLETED", "ERROR", "CANCELED")
                and state
            ),
            f"experiment {experiment_id} to end",
            deadline_s,
        )
    )


def allocation(cluster: Cluster, trial_id: int) -> dict[str, Any]:
    [row] = cluster.query("SELECT * FROM read_model.allocations WHERE trial_id = $1", trial_id)
    found = dict(row)
    placements = found["placements"]
    found["placements"] = json.loads(placements) if isinstance(placements, str) else placements
    return found


def test_a_4_slot_trial_spans_both_agents_and_allgathers_every_rank(
    cluster: TwoAgents, tmp_path: Path
) -> None:
    shutil.copy(EXAMPLE / "train_ddp.py", tmp_path / "train_ddp.py")
    experiment_id = cluster.create(tmp_path, example_config("distributed"))
    trial_id = only_trial(cluster, experiment_id)
    assert wait_until_ended(cluster, experiment_id) == "COMPLETED", cluster.logs(trial_id)

    placements = allocation(cluster, trial_id)["placements"]
    assert sorted(len(p["slot_ids"]) for p in placements) == [2, 2], placements
    assert len({p["agent_id"] for p in placements}) == 2, placements

    logs = cluster.logs(trial_id)
    # (rank, node) of every worker, in rank order, as the chief saw it.
    assert "allgather returned [(0, 0), (1, 0), (2, 1), (3, 1)]" in logs, logs
    for rank in range(4):
        assert f"worker {rank} of 4 on node {rank // 2} ready" in logs, logs
    # Only the chief reported: each step once, and the validations say 4 workers took part.
    assert training_steps(cluster, trial_id) == list(range(1, STEPS + 1))
    validations = cluster.query(
        "SELECT metrics FROM read_model.metrics WHERE trial_id = $1 AND \"group\" = 'validation'", trial_id
    )
    assert validations and all(json.loads(row["metrics"])["workers"] == 4 for row in validations), validations

    rank_1 = cluster.det("trial", "logs", str(trial_id), "--rank", "1").stdout
    assert "worker 1 of 4" in rank_1, rank_1
    assert not any(f"worker {rank} of 4" in rank_1 for rank in (0, 2, 3)), rank_1


# Rank 3 (the second agent's second worker) exits 1 once the gang is up; the others wait
# far longer than the test does, so the trial can only end if the gang is killed as one.
# (No torch process group: Determined's collectives need none, and importing torch in each
# worker costs seconds.)
FAILING_TRAIN_PY = textwrap.dedent(
    """
    import sys, time
    import determined as det

    distributed = det.core.DistributedContext.from_torch_distributed()
    with det.core.init(distributed=distributed) as core_context:
        ranks = core_context.distributed.allgather(core_context.distributed.rank)
        print("gang of", len(ranks), "up", flush=True)
        if core_context.distributed.rank == 3:
            print("worker 3 gives up", flush=True)
            sys.exit(1)
        time.sleep(600)
    """
)


def test_a_worker_that_exits_1_fails_the_gang(cluster: TwoAgents, tmp_path: Path) -> None:
    (tmp_path / "fail.py").write_text(FAILING_TRAIN_PY)
    experiment_id = cluster.create(tmp_path, example_config("distributed-failing", "fail.py"))
    trial_id = only_trial(cluster, experiment_id)
    assert wait_until_ended(cluster, experiment_id, 120) == "ERROR", cluster.logs(trial_id)

    trial = cluster.json("trial", "describe", str(trial_id))["trial"]
    assert trial["state"] == "ERROR", trial
    ended = allocation(cluster, trial_id)
    assert ended["exit_code"] not in (None, 0) and not ended["agent_lost"], ended
    logs = cluster.logs(trial_id)
    assert "worker 3 gives up" in logs, logs
