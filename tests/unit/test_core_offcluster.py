"""Off-cluster, a script written for the cluster runs unchanged against null objects."""

import logging
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

import determined as det

TRAIN_PY = textwrap.dedent(
    """
    import logging
    import determined as det

    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    assert det.get_cluster_info() is None
    with det.core.init(checkpoint_storage=STORAGE) as core_context:
        assert core_context.info is None
        assert core_context.distributed.rank == 0 and core_context.distributed.size == 1
        assert core_context.distributed.allgather("x") == ["x"]
        steps = 0
        for epoch in range(3):
            steps += 10
            core_context.train.report_training_metrics(steps, {"loss": 1.0 / steps})
            core_context.train.report_validation_metrics(steps, {"val_loss": 2.0 / steps})
            core_context.train.report_metrics("custom", steps, {"x": [1, 2]})
            core_context.train.report_progress(steps / 30)
            core_context.train.set_status("training")
            with core_context.checkpoint.store_path({"steps_completed": steps}) as (path, storage_id):
                (path / "model.txt").write_text(str(steps))
            if core_context.preempt.should_preempt():
                raise SystemExit("preempted off-cluster")
        assert core_context.train.get_experiment_best_validation() is None
        with core_context.checkpoint.restore_path(storage_id) as path:
            print("RESTORED", (path / "model.txt").read_text())
        print("METADATA", core_context.checkpoint.get_metadata(storage_id))
    """
)


def test_a_cluster_script_runs_off_cluster(tmp_path: pathlib.Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(f"STORAGE = {str(tmp_path / 'ckpts')!r}\n" + TRAIN_PY)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_")}
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "RESTORED 30" in result.stdout
    assert "METADATA {'steps_completed': 30}" in result.stdout
    assert (
        "INFO: [" in result.stderr and "report_metrics(group=validation, steps_completed=30" in result.stderr
    )
    assert len(list((tmp_path / "ckpts").iterdir())) == 3


def test_off_cluster_checkpoints_default_to_the_user_data_dir(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    with (
        det.core.init() as core_context,
        core_context.checkpoint.store_path({"steps_completed": 1}) as (path, storage_id),
    ):
        pass
    assert path == tmp_path / "determined" / "checkpoints" / storage_id
    assert (path / "metadata.json").exists()


def test_invalid_hp_ends_the_script_with_exit_code_zero(tmp_path: pathlib.Path) -> None:
    with pytest.raises(SystemExit) as exit_info, det.core.init(checkpoint_storage=str(tmp_path)):
        raise det.InvalidHP("lr too large")
    assert exit_info.value.code == 0


@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_off_cluster_the_searcher_gives_one_operation_of_length_one(tmp_path: pathlib.Path) -> None:
    lengths = []
    with det.core.init(checkpoint_storage=str(tmp_path)) as core_context:
        for op in core_context.searcher.operations():
            lengths.append(op.length)
            op.report_completed(0.5)
    assert lengths == [1]


def test_single_process_collectives() -> None:
    """Multi-process ones: tests/unit/test_harness_distributed.py."""
    single = det.core.DistributedContext(
        rank=0, size=1, local_rank=0, local_size=1, cross_rank=0, cross_size=1
    )
    assert (single.gather(1), single.broadcast(2), single.allgather_local(3)) == ([1], 2, [3])


def test_distributed_context_checks_its_arguments() -> None:
    with pytest.raises(ValueError, match="need 0 <= rank < size"):
        det.core.DistributedContext(rank=2, size=2, local_rank=0, local_size=2, cross_rank=0, cross_size=1)
    with pytest.raises(ValueError, match="chief_ip is required"):
        det.core.DistributedContext(rank=0, size=4, local_rank=0, local_size=2, cross_rank=0, cross_size=2)


def test_from_torch_distributed_reads_torchrun_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {
        "RANK": "3",
        "WORLD_SIZE": "4",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "2",
        "GROUP_RANK": "1",
        "GROUP_WORLD_SIZE": "2",
        "DET_CHIEF_IP": "10.0.0.1",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    context = det.core.DistributedContext.from_torch_distributed()
    assert (context.rank, context.size, context.local_rank, context.local_size) == (3, 4, 1, 2)
    assert (context.get_num_agents(), context.chief_ip) == (2, "10.0.0.1")


def test_preempt_modes() -> None:
    worker = det.core.DistributedContext(
        rank=1, size=2, local_rank=1, local_size=2, cross_rank=0, cross_size=1
    )
    chief_only = det.core.DummyPreemptContext(worker, det.core.PreemptMode.ChiefOnly)
    with pytest.raises(RuntimeError, match="chief"):
        chief_only.should_preempt()
    assert (
        det.core.DummyPreemptContext(worker, det.core.PreemptMode.WorkersAskMaster).should_preempt() is False
    )


def test_off_cluster_set_status_is_checked_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    train = det.core.DummyTrainContext()
    with caplog.at_level(logging.INFO, logger="determined.core"):
        train.set_status("validating")
    assert "set_status(validating)" in caplog.text
    with pytest.raises(ValueError, match="non-empty"):
        train.set_status("")
    with pytest.raises(TypeError, match="status must be a str, got int"):
        train.set_status(3)  # type: ignore[arg-type]


def test_checkpoint_operations_on_shared_fs(tmp_path: pathlib.Path) -> None:
    source = tmp_path / "source"
    (source / "sub").mkdir(parents=True)
    (source / "weights.bin").write_bytes(b"12345")
    (source / "sub" / "skip.txt").write_text("no")
    with det.core.init(checkpoint_storage=str(tmp_path / "store")) as core_context:
        checkpoint = core_context.checkpoint
        storage_id = checkpoint.upload(
            source, {"steps_completed": 5, "note": "hi"}, selector=lambda p: "skip" not in p
        )
        assert checkpoint.get_metadata(storage_id) == {"steps_completed": 5, "note": "hi"}
        checkpoint.download(storage_id, tmp_path / "copy")
        assert (tmp_path / "copy" / "weights.bin").read_bytes() == b"12345"
        assert not (tmp_path / "copy" / "sub" / "skip.txt").exists()
        checkpoint.delete(storage_id)
        with pytest.raises(FileNotFoundError, match=storage_id):
            checkpoint.get_metadata(storage_id)
        with pytest.raises(ValueError, match="not a checkpoint storage_id: '../etc'"):
            checkpoint.download("../etc", tmp_path / "x")


def test_checkpoint_metadata_needs_steps_completed(tmp_path: pathlib.Path) -> None:
    with det.core.init(checkpoint_storage=str(tmp_path)) as core_context:
        for metadata in (None, {"other": 1}):
            with (
                pytest.raises(ValueError, match="must contain steps_completed"),
                core_context.checkpoint.store_path(metadata),
            ):
                pass
    assert list(tmp_path.iterdir()) == []


def test_a_failed_store_leaves_no_partial_checkpoint(tmp_path: pathlib.Path) -> None:
    with (
        det.core.init(checkpoint_storage=str(tmp_path)) as core_context,
        pytest.raises(OSError, match="disk full"),
        core_context.checkpoint.store_path({"steps_completed": 1}) as (path, _),
    ):
        (path / "half").write_text("x")
        raise OSError("disk full")
    assert list(tmp_path.iterdir()) == []
