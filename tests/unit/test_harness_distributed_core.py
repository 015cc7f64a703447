"""`det.core.init(distributed=...)` with several workers (threads, real sockets) against the
in-process fake gateway: only the chief reports, should_preempt() is decided by the chief
and broadcast, sharded checkpoints are stored once by all ranks together."""

import json
import pathlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from support.core_gateway import FakeGateway, Server, set_trial_env
from support.distributed_ranks import context, free_port_pair, run_ranks

import determined as det
from determined.core._checkpoint import merge_metadata


@pytest.fixture
def on_cluster(
    gateway: Server, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[pathlib.Path]:
    """A 2-slot trial's environment; yields the checkpoint storage root."""
    config = {"checkpoint_storage": {"type": "shared_fs", "host_path": str(tmp_path)}}
    set_trial_env(monkeypatch, gateway.port, config, DET_SLOT_IDS="[0, 1]")
    yield tmp_path
    det.get_cluster_info.cache_clear()


def on_every_rank(size: int, work: Callable[[det.core.Context, int], Any]) -> dict[int, Any]:
    """Run `work` inside `det.core.init()` on `size` ranks of one node."""
    ports = free_port_pair()

    def run(rank: int) -> Any:
        with det.core.init(distributed=context(rank, size, 1, ports)) as core_context:
            return work(core_context, rank)

    results = run_ranks(size, run)
    for result in results.values():
        if isinstance(result, Exception):
            raise result
    return results


def test_a_multi_slot_or_multi_container_task_needs_a_distributed_context(
    on_cluster: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ValueError, match="you must provide a valid DistributedContext for a multi-slot task"):
        det.core.init()
    monkeypatch.setenv("DET_SLOT_IDS", "[0]")
    monkeypatch.setenv("DET_CONTAINER_ADDRS", '["10.0.0.1", "10.0.0.2"]')
    det.get_cluster_info.cache_clear()
    with pytest.raises(ValueError, match="you must provide a valid DistributedContext"):
        det.core.init()


def test_only_the_chief_reports(fake: FakeGateway, on_cluster: pathlib.Path) -> None:
    def work(core_context: det.core.Context, rank: int) -> None:
        core_context.train.report_training_metrics(1, {"loss": rank})
        core_context.train.report_validation_metrics(1, {"val": rank})
        core_context.train.report_progress(0.5 + rank / 10)
        core_context.train.set_status(f"rank {rank}")
        core_context.train.set_metadata({"rank": rank})
        if rank == 1:  # checked as on the chief, even though dropped
            with pytest.raises(ValueError, match="between 0 and 1"):
                core_context.train.report_progress(2)

    on_every_rank(2, work)
    assert [(group, steps, metrics) for group, steps, metrics in fake.reports()] == [
        ("training", 1, {"loss": 0}),
        ("validation", 1, {"val": 0}),
    ]
    assert fake.progress == [0.5]
    assert [status.status for status in fake.statuses] == ["rank 0"]
    assert [json.loads(m) for m in fake.metadata_sets] == [{"rank": 0}]


def test_should_preempt_is_the_chiefs_answer_on_every_rank(
    fake: FakeGateway, on_cluster: pathlib.Path
) -> None:
    fake.update(stop=True, reason="preempted by the scheduler")

    def work(core_context: det.core.Context, rank: int) -> bool:
        return core_context.preempt.should_preempt()

    assert on_every_rank(3, work) == {0: True, 1: True, 2: True}
    assert fake.acks == ["7.1"]  # the chief alone acknowledged
    fake.acks.clear()
    fake.update(stop=False)


def test_a_sharded_checkpoint_is_one_checkpoint_of_every_ranks_files(
    fake: FakeGateway, on_cluster: pathlib.Path
) -> None:
    def work(core_context: det.core.Context, rank: int) -> str:
        metadata = {"steps_completed": 5, "shards": {f"rank{rank}": f"part{rank}.bin"}}
        with core_context.checkpoint.store_path(metadata, shard=True) as (path, storage_id):
            (path / f"part{rank}.bin").write_bytes(bytes([rank]) * 10)
        return storage_id

    ids = on_every_rank(2, work)
    assert ids[0] == ids[1]
    [report] = fake.checkpoints
    assert report.uuid == ids[0] and report.steps_completed == 5
    assert json.loads(report.metadata_json) == {
        "steps_completed": 5,
        "shards": {"rank0": "part0.bin", "rank1": "part1.bin"},
    }
    assert set(report.resources) == {"part0.bin", "part1.bin", "metadata.json"}


def test_a_shard_that_fails_discards_the_checkpoint_on_every_rank(
    fake: FakeGateway, on_cluster: pathlib.Path
) -> None:
    def work(core_context: det.core.Context, rank: int) -> str:
        try:
            with core_context.checkpoint.store_path({"steps_completed": 5}, shard=True) as (path, _):
                (path / f"part{rank}").write_text("x")
                if rank == 1:
                    raise OSError("disk full")
        except Exception as error:  # noqa: BLE001 - the test compares them
            return f"{type(error).__name__}: {error}"
        return "stored"

    results = on_every_rank(2, work)
    assert results[1] == "OSError: disk full"
    assert results[0].startswith("RuntimeError: sharded checkpoint") and "rank(s) [1] failed" in results[0]
    assert fake.checkpoints == []
    assert list(on_cluster.iterdir()) == []


def test_shard_metadata_merge_recursively_and_refuse_conflicts() -> None:
    assert merge_metadata({"a": {"x": 1}, "n": 1}, {"a": {"y": 2}, "n": 1}) == {"a": {"x": 1, "y": 2}, "n": 1}
    with pytest.raises(ValueError, match="disagree on 'n'"):
        merge_metadata({"n": 1}, {"n": 2})


def test_a_non_chief_may_not_store_alone(on_cluster: pathlib.Path) -> None:
    ports = free_port_pair()
    worker = context(1, 2, 1, ports)
    checkpoint = det.core.CheckpointContext(on_cluster, worker, lambda *args: None)
    with pytest.raises(RuntimeError, match="only the chief"), checkpoint.store_path({"steps_completed": 1}):
        pass
    worker.close()
