"""Checkpoints of several workers on a cloud storage (s3 on `s3_server`, moto's real
server): sharded uploads from every node, conflicts between nodes, and downloads shared by
the workers of a node. Ranks run on threads with real DistributedContexts (two "nodes" on
localhost keep their staging folders apart by node)."""

import pathlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from support.distributed_ranks import context, free_port_pair, run_ranks
from support.s3_server import S3Server

from determined.common import storage
from determined.core import CheckpointContext, DistributedContext, DownloadMode

Report = tuple[str, int, str, dict[str, int]]
Contexts = Callable[..., tuple[list[CheckpointContext], list[Report]]]


@pytest.fixture
def section(s3_server: S3Server) -> dict[str, Any]:
    return s3_server.storage(prefix="sharded")


@pytest.fixture
def contexts(section: dict[str, Any], tmp_path: pathlib.Path) -> Iterator[Contexts]:
    """contexts(size=, nodes=): one CheckpointContext per rank (staging under tmp_path),
    all reporting into the one list returned; their connections closed afterwards."""
    distributed: list[DistributedContext] = []

    def make(*, size: int, nodes: int) -> tuple[list[CheckpointContext], list[Report]]:
        ports = free_port_pair()
        reports: list[Report] = []
        built = []
        for rank in range(size):
            distributed.append(context(rank, size, nodes, ports))
            built.append(
                CheckpointContext(
                    storage.build(section),
                    distributed[-1],
                    lambda *report: reports.append(report),
                    staging=tmp_path / "staging",
                )
            )
        return built, reports

    yield make
    for each in distributed:
        each.close()


def test_every_node_uploads_its_own_files_once(
    contexts: Contexts, section: dict[str, Any], s3_server: S3Server
) -> None:
    checkpoints, reports = contexts(size=4, nodes=2)
    paths: dict[int, pathlib.Path] = {}

    def store(rank: int) -> str:
        metadata = {"steps_completed": 8, "shards": {f"rank{rank}": f"rank{rank}.bin"}}
        with checkpoints[rank].store_path(metadata, shard=True) as (path, storage_id):
            paths[rank] = path
            (path / f"rank{rank}.bin").write_bytes(bytes([rank]) * (rank + 1))
            (path / "config.yaml").write_text("same on every rank\n")  # equal contents agree
        return storage_id

    results = run_ranks(4, store)
    storage_id = results[0]
    assert all(result == storage_id for result in results.values()), results
    assert paths[0] == paths[1] != paths[2] == paths[3]  # a staging folder per node
    assert not any(path.exists() for path in paths.values())
    relpaths = ["config.yaml", "metadata.json", "rank0.bin", "rank1.bin", "rank2.bin", "rank3.bin"]
    assert s3_server.keys(section["bucket"]) == [f"sharded/{storage_id}/{relpath}" for relpath in relpaths]
    [(reported_id, steps_completed, metadata_json, resources)] = reports
    assert (reported_id, steps_completed) == (storage_id, 8)
    assert resources == storage.build(section).list_resources(storage_id)
    assert '"rank3": "rank3.bin"' in metadata_json


def test_two_nodes_storing_different_files_under_one_name_discard_the_checkpoint(
    contexts: Contexts, section: dict[str, Any], s3_server: S3Server, tmp_path: pathlib.Path
) -> None:
    checkpoints, reports = contexts(size=2, nodes=2)

    def store(rank: int) -> None:
        with checkpoints[rank].store_path({"steps_completed": 1}, shard=True) as (path, _):
            (path / "model.pt").write_bytes(f"weights of rank {rank}".encode())

    results = run_ranks(2, store)
    for rank in (0, 1):
        assert isinstance(results[rank], RuntimeError)
        assert "stored different files named model.pt" in str(results[rank])
    assert s3_server.keys(section["bucket"]) == [] and reports == []
    assert list((tmp_path / "staging").rglob("model.pt")) == []


def test_a_failed_rank_discards_the_checkpoint_everywhere(
    contexts: Contexts, section: dict[str, Any], s3_server: S3Server
) -> None:
    checkpoints, reports = contexts(size=2, nodes=2)

    def store(rank: int) -> None:
        with checkpoints[rank].store_path({"steps_completed": 1}, shard=True) as (path, _):
            (path / f"part{rank}").write_bytes(b"p")
            if rank == 1:
                raise OSError("disk full")

    results = run_ranks(2, store)
    assert str(results[1]) == "disk full"
    assert "rank(s) [1] failed" in str(results[0])
    assert s3_server.keys(section["bucket"]) == [] and reports == []


def test_the_workers_of_a_node_share_one_download(
    contexts: Contexts, section: dict[str, Any], tmp_path: pathlib.Path
) -> None:
    source = tmp_path / "source"
    (source / "sub").mkdir(parents=True)
    (source / "model.pt").write_bytes(b"m" * 100)
    (source / "sub" / "notes.txt").write_text("n")
    storage.build(section).upload(source, "ckpt")
    checkpoints, _ = contexts(size=2, nodes=1)

    def restore(rank: int) -> tuple[pathlib.Path, dict[str, int], pathlib.Path, dict[str, int]]:
        checkpoint = checkpoints[rank]
        with checkpoint.restore_path("ckpt") as shared:
            shared_files = storage.local_resources(shared)
        with checkpoint.restore_path(
            "ckpt", DownloadMode.NoSharedDownload, selector=lambda relpath: relpath.endswith(".txt")
        ) as own:
            own_files = storage.local_resources(own)
        checkpoint.download("ckpt", tmp_path / "copy", selector=lambda relpath: relpath == "model.pt")
        return shared, shared_files, own, own_files

    results = run_ranks(2, restore)
    assert results[0][0] == results[1][0]  # one folder for the node
    assert results[0][2] != results[1][2]  # one each
    for shared, shared_files, own, own_files in results.values():
        assert shared_files == storage.local_resources(source)
        assert own_files == {"sub/": 0, "sub/notes.txt": 1}
        assert not shared.exists() and not own.exists()
    assert storage.local_resources(tmp_path / "copy") == {"model.pt": 100}


def test_a_failed_shared_download_fails_on_every_worker(contexts: Contexts) -> None:
    checkpoints, _ = contexts(size=2, nodes=1)

    def restore(rank: int) -> None:
        with checkpoints[rank].restore_path("missing"):
            pass

    results = run_ranks(2, restore)
    for rank in (0, 1):
        assert isinstance(results[rank], FileNotFoundError), results[rank]
        assert "checkpoint missing not found" in str(results[rank])
