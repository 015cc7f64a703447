"""`det checkpoint`, `det model`, `det experiment list-checkpoints | set
gc-policy | delete` and `det trial list-checkpoints`: arguments checked at parse
time, what is sent, what is printed, and downloads (direct from shared_fs and
from a real S3-compatible server, through the master resumed and retried, auto
falling back) against an in-process gateway (tests/support/checkpoint_gateway.py)."""

import csv
import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.checkpoint_gateway import CheckpointGateway, Served
from support.s3_server import S3Server

from deploy.local.servers import free_port
from determined.cli.__main__ import build_parser, main
from determined.common import storage
from determined.proto import api_pb2

UUID_A = "aaaaaaaa-0000-4000-8000-000000000001"
UUID_B = "bbbbbbbb-0000-4000-8000-000000000002"
FILES = {"model.bin": b"0123456789" * 3, "sub/opt.bin": b"optimizer!", "empty": b""}


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[tuple[str, CheckpointGateway]]:
    servicer = CheckpointGateway(tmp_path / "storage")
    served = Served(servicer)
    try:
        yield served.address, servicer
    finally:
        served.stop()


def det(address: str, *argv: str) -> int:
    return main(["-m", address, *argv])


def files_under(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["checkpoint", "rm", UUID_A], "the following arguments are required: --glob"),
        (["checkpoint", "rm", UUID_A, "--glob", "../x"], "may not contain .."),
        (["checkpoint", "rm", UUID_A, "--glob", " "], "a glob may not be empty"),
        (["checkpoint", "download", UUID_A, "--mode", "fast"], "invalid choice: 'fast'"),
        (["checkpoint", "download", f"{UUID_A},{UUID_B}"], "is not a checkpoint UUID"),
        (["experiment", "lc", "3", "--best", "0"], "0 is not a number of checkpoints: 1 or more"),
        (["experiment", "lc", "3", "--json", "--csv"], "not allowed with argument"),
        (
            ["experiment", "set", "gc-policy", "3", "--save-experiment-best", "1", "--save-trial-best", "1"],
            "required: --save-trial-latest",
        ),
        (
            [
                "experiment",
                "set",
                "gc-policy",
                "3",
                "--save-experiment-best",
                "-1",
                "--save-trial-best",
                "1",
                "--save-trial-latest",
                "1",
            ],
            "-1 is not a count: 0 or more",
        ),
        (
            [
                "experiment",
                "set",
                "gc-policy",
                "3",
                "--save-experiment-best",
                "0",
                "--save-trial-best",
                "0",
                "--save-trial-latest",
                "0",
                "--yes",
                "--dry-run",
            ],
            "not allowed with argument",
        ),
        (["model", "create", " "], "a model name may not be empty"),
        (["trial", "lc", "x"], "'x' is not a trial id"),
    ],
)
def test_bad_arguments_are_refused_at_parse_time(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_listings_show_a_table_csv_or_json_and_best_asks_the_best_n(
    fake: tuple[str, CheckpointGateway], capsys: pytest.CaptureFixture[str]
) -> None:
    address, gateway = fake
    gateway.add_checkpoint(UUID_A, FILES, steps=10, metric=0.25)
    gateway.add_checkpoint(UUID_B, {"x": b"12"}, steps=20)
    assert det(address, "experiment", "list-checkpoints", "3") == 0
    header, _, first, second = capsys.readouterr().out.splitlines()
    assert [h.strip() for h in header.split("|")] == [
        "Trial ID",
        "# of Batches",
        "State",
        "Validation Metric",
        "UUID",
        "Resources",
        "Size",
    ]
    assert [c.strip() for c in first.split("|")] == ["5", "10", "COMPLETED", "0.25", UUID_A, "3", "40.0B"]
    assert [c.strip() for c in second.split("|")] == ["5", "20", "COMPLETED", "", UUID_B, "1", "2.0B"]

    assert det(address, "e", "lc", "3", "--best", "1", "--csv") == 0
    rows = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    assert rows == [
        ["Trial ID", "# of Batches", "State", "Validation Metric", "UUID", "Resources", "Size"],
        ["5", "10", "COMPLETED", "0.25", UUID_A, "3", "40"],
    ]
    best = gateway.sent(api_pb2.GetExperimentCheckpointsRequest)[-1]
    assert (best.sort_by, best.order_by, best.max_results) == ("searcher_metric", "", 1)

    assert det(address, "trial", "list-checkpoints", "5", "--json") == 0
    listed = json.loads(capsys.readouterr().out)
    assert [c["uuid"] for c in listed] == [UUID_A, UUID_B]
    assert listed[0]["validation_metrics"] == {"loss": 0.25} and listed[0]["storage"]["type"] == "shared_fs"
    assert listed[0]["resources"]["sub/"] == 0 and listed[0]["metadata"] == {"steps_completed": 10}
    assert gateway.sent(api_pb2.GetTrialCheckpointsRequest)[-1].sort_by == ""

    assert det(address, "checkpoint", "list", "3", "--json") == 0
    assert len(json.loads(capsys.readouterr().out)) == 2


def test_describe_shows_the_checkpoint_its_files_versions_and_why_files_are_left(
    fake: tuple[str, CheckpointGateway], capsys: pytest.CaptureFixture[str]
) -> None:
    address, gateway = fake
    checkpoint = gateway.add_checkpoint(UUID_A, FILES, metric=0.5, state="PARTIALLY_DELETED")
    checkpoint.model_versions.append("mnist:2")
    checkpoint.delete_error = "AccessDenied on model.bin"
    assert det(address, "checkpoint", "describe", UUID_A) == 0
    out = capsys.readouterr().out
    assert "PARTIALLY_DELETED" in out and '{"loss": 0.5}' in out and '{"steps_completed": 10}' in out
    assert "Model versions: mnist:2" in out
    assert "Files left after a deletion failed: AccessDenied on model.bin" in out
    assert "sub/opt.bin | 10.0B" in out

    assert det(address, "c", "describe", UUID_A, "--json") == 0
    assert json.loads(capsys.readouterr().out)["model_versions"] == ["mnist:2"]
    assert det(address, "c", "describe", UUID_B) == 1
    assert f"checkpoint {UUID_B} not found" in capsys.readouterr().err


def test_a_download_through_the_master_resumes_what_is_there(
    fake: tuple[str, CheckpointGateway], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    address, gateway = fake
    gateway.add_checkpoint(UUID_A, FILES)
    target = tmp_path / "out"
    (target / "sub").mkdir(parents=True)
    (target / "model.bin").write_bytes(FILES["model.bin"][:13])  # cut short: continues from byte 13
    (target / "sub/opt.bin").write_bytes(b"x" * 50)  # longer than the file: starts over
    assert det(address, "checkpoint", "download", UUID_A, "-o", str(target), "--mode", "master", "-q") == 0
    assert capsys.readouterr().out == f"{target}\n"
    assert files_under(target) == FILES
    offsets = {r.path: r.offset for r in gateway.sent(api_pb2.DownloadCheckpointFileRequest)}
    assert offsets == {"model.bin": 13, "sub/opt.bin": 0}

    gateway.requests.clear()  # whole now: nothing is fetched again
    assert det(address, "checkpoint", "download", UUID_A, "-o", str(target), "--mode", "master") == 0
    assert gateway.sent(api_pb2.DownloadCheckpointFileRequest) == []
    assert capsys.readouterr().out.startswith(f"Local checkpoint path:\n{target}\n")


def test_a_broken_stream_is_resumed_from_the_byte_it_stopped_at(
    fake: tuple[str, CheckpointGateway], tmp_path: Path
) -> None:
    address, gateway = fake
    gateway.add_checkpoint(UUID_A, {"model.bin": bytes(range(200))})
    gateway.break_after_chunks = 3
    assert det(address, "c", "download", UUID_A, "-o", str(tmp_path / "out"), "--mode", "master") == 0
    assert (tmp_path / "out/model.bin").read_bytes() == bytes(range(200))
    assert [r.offset for r in gateway.sent(api_pb2.DownloadCheckpointFileRequest)] == [0, 12]


def test_direct_reads_the_shared_fs_and_auto_falls_back_to_the_master(
    fake: tuple[str, CheckpointGateway], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    address, gateway = fake
    gateway.add_checkpoint(UUID_A, FILES)
    assert det(address, "c", "download", UUID_A, "-o", str(tmp_path / "direct"), "--mode", "direct") == 0
    assert files_under(tmp_path / "direct") == FILES
    assert gateway.sent(api_pb2.DownloadCheckpointFileRequest) == []
    assert capsys.readouterr().err == ""

    elsewhere = json.dumps({"type": "shared_fs", "host_path": str(tmp_path / "not-on-this-machine")})
    gateway.add_checkpoint(UUID_B, FILES, storage_json=elsewhere)
    assert det(address, "c", "download", UUID_B, "-o", str(tmp_path / "auto"), "--json") == 0
    captured = capsys.readouterr()
    assert f"could not read checkpoint {UUID_B} from its shared_fs storage here" in captured.err
    assert "downloading it through the master" in captured.err
    assert json.loads(captured.out)["path"] == str(tmp_path / "auto")
    assert files_under(tmp_path / "auto") == FILES

    assert det(address, "c", "download", UUID_B, "-o", str(tmp_path / "no"), "--mode", "direct") == 1
    assert f"could not download checkpoint {UUID_B} from its shared_fs storage" in capsys.readouterr().err


def test_a_direct_download_short_of_the_recorded_files_fails(
    fake: tuple[str, CheckpointGateway], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    address, gateway = fake
    gateway.add_checkpoint(UUID_A, FILES).resources["lost.bin"] = 4  # recorded, not in the storage
    assert det(address, "c", "download", UUID_A, "-o", str(tmp_path / "out"), "--mode", "direct") == 1
    assert "lost.bin is missing or not its recorded size" in capsys.readouterr().err


def test_deleted_checkpoints_and_paths_outside_the_folder_are_refused(
    fake: tuple[str, CheckpointGateway], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    address, gateway = fake
    gateway.add_checkpoint(UUID_A, {}, state="DELETED")
    assert det(address, "c", "download", UUID_A, "-o", str(tmp_path / "out")) == 1
    assert f"checkpoint {UUID_A} was deleted" in capsys.readouterr().err
    gateway.add_checkpoint(UUID_B, {"x": b"1"}).resources["../escape"] = 1
    assert det(address, "c", "download", UUID_B, "-o", str(tmp_path / "out"), "--mode", "master") == 1
    assert "the checkpoint lists a file outside its folder: '../escape'" in capsys.readouterr().err
    assert not (tmp_path / "escape").exists()


def test_direct_and_auto_downloads_from_s3(
    fake: tuple[str, CheckpointGateway],
    s3_server: S3Server,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    address, gateway = fake
    section = s3_server.storage(prefix="runs")
    gateway.add_checkpoint(UUID_A, FILES, storage_json=json.dumps(section))
    storage.build(section).upload(gateway.storage / UUID_A, UUID_A)
    assert det(address, "c", "download", UUID_A, "-o", str(tmp_path / "s3"), "--mode", "direct") == 0
    assert files_under(tmp_path / "s3") == FILES
    assert gateway.sent(api_pb2.DownloadCheckpointFileRequest) == []

    down = {**section, "endpoint_url": f"http://127.0.0.1:{free_port()}"}  # nothing listens there
    gateway.add_checkpoint(UUID_B, FILES, storage_json=json.dumps(down))
    assert det(address, "c", "download", UUID_B, "-o", str(tmp_path / "auto")) == 0
    assert "from its s3 storage here" in capsys.readouterr().err
    assert files_under(tmp_path / "auto") == FILES
    assert {r.path for r in gateway.sent(api_pb2.DownloadCheckpointFileRequest)} == {
        "model.bin",
        "sub/opt.bin",
    }


def test_set_gc_policy_previews_asks_and_applies(
    fake: tuple[str, CheckpointGateway], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    address, gateway = fake
    going = gateway.add_checkpoint(UUID_A, FILES, metric=0.9)
    gateway.preview = api_pb2.PreviewGcResponse(checkpoints=[going], bytes=40)
    policy = ["--save-experiment-best", "0", "--save-trial-best", "1", "--save-trial-latest", "2"]

    assert det(address, "e", "set", "gc-policy", "3", *policy, "--dry-run") == 0
    out = capsys.readouterr().out
    assert out.startswith(
        "save_experiment_best=0, save_trial_best=1, save_trial_latest=2 deletes these 1 "
        "checkpoints of experiment 3, freeing 40.0B:"
    )
    assert UUID_A in out
    preview = gateway.sent(api_pb2.PreviewGcRequest)[-1]
    assert (preview.experiment_id, preview.save_trial_best, preview.save_trial_latest) == (3, 1, 2)
    assert gateway.sent(api_pb2.SetGcPolicyRequest) == []

    monkeypatch.setattr("sys.stdin", io.StringIO("n\n"))
    assert det(address, "e", "set", "gc-policy", "3", *policy) == 0
    assert "Apply the new policy? [y/N]" in capsys.readouterr().err
    assert gateway.sent(api_pb2.SetGcPolicyRequest) == []

    monkeypatch.setattr("sys.stdin", io.StringIO("yes\n"))
    assert det(address, "e", "set", "gc-policy", "3", *policy) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "Set the GC policy of experiment 3: save_experiment_best=0, save_trial_best=1, save_trial_latest=2"
    )
    assert len(gateway.sent(api_pb2.SetGcPolicyRequest)) == 1

    gateway.unchanged_reason = "Experiment 3 has this GC policy already: nothing to change"
    assert det(address, "e", "set", "gc-policy", "3", *policy, "--yes", "--json") == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["applied"] is False and answer["unchanged_reason"] == gateway.unchanged_reason
    assert answer["bytes"] == 40 and [c["uuid"] for c in answer["checkpoints"]] == [UUID_A]
    assert answer["policy"] == {"save_experiment_best": 0, "save_trial_best": 1, "save_trial_latest": 2}


def test_deletions_ask_first_and_a_script_without_yes_deletes_nothing(
    fake: tuple[str, CheckpointGateway], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    address, gateway = fake
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert det(address, "checkpoint", "delete", f"{UUID_A},{UUID_B}") == 1
    assert "no answer on stdin: pass --yes" in capsys.readouterr().err
    assert det(address, "experiment", "delete", "3") == 1
    assert gateway.requests == []

    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))
    assert det(address, "checkpoint", "delete", f"{UUID_A},{UUID_B}") == 0
    assert capsys.readouterr().out == f"Deletion of checkpoints {UUID_A}, {UUID_B} is in progress\n"
    assert (
        det(address, "c", "rm", UUID_A, "--glob", "optimizer/**", "--glob", "*.tmp", "--yes", "--json") == 0
    )
    assert json.loads(capsys.readouterr().out)["globs"] == ["optimizer/**", "*.tmp"]
    delete, rm = gateway.sent(api_pb2.DeleteCheckpointsRequest)
    assert (list(delete.uuids), list(delete.globs)) == ([UUID_A, UUID_B], [])
    assert (list(rm.uuids), list(rm.globs)) == ([UUID_A], ["optimizer/**", "*.tmp"])

    assert det(address, "e", "delete", "3", "--yes") == 0
    assert capsys.readouterr().out == "Deletion of experiment 3 is in progress\n"
    assert gateway.sent(api_pb2.DeleteExperimentRequest)[0].experiment_id == 3

    gateway.add_checkpoint(UUID_A, FILES).model_versions.append("mnist:1")
    assert det(address, "c", "delete", UUID_A, "--yes") == 1
    assert f"checkpoints {UUID_A} are model versions" in capsys.readouterr().err


def test_the_model_registry_commands(
    fake: tuple[str, CheckpointGateway], capsys: pytest.CaptureFixture[str]
) -> None:
    address, gateway = fake
    gateway.add_checkpoint(UUID_A, FILES, metric=0.1)
    assert det(address, "model", "create", "mnist", "-d", "digits", "-l", "cv", "-l", "small") == 0
    out = capsys.readouterr().out
    assert out.startswith("Created model mnist\n") and "cv, small" in out
    assert det(address, "model", "register-version", "mnist", UUID_A, "--comment", "first") == 0
    assert capsys.readouterr().out.startswith(f"Registered checkpoint {UUID_A} as version 1 of model mnist\n")
    assert gateway.sent(api_pb2.RegisterModelVersionRequest)[0].comment == "first"

    assert det(address, "model", "list") == 0
    _, _, row = capsys.readouterr().out.splitlines()
    assert [c.strip() for c in row.split("|")][:2] == ["1", "mnist"] and row.rstrip().endswith("| 1")
    assert det(address, "model", "describe", "mnist") == 0
    out = capsys.readouterr().out
    assert "Versions:" in out and UUID_A in out and '{"loss": 0.1}' in out
    assert det(address, "m", "describe", "mnist", "--json") == 0
    [version] = json.loads(capsys.readouterr().out)["versions"]
    assert (version["version"], version["checkpoint"]["uuid"]) == (1, UUID_A)
    assert det(address, "model", "create", "mnist", "--json") == 1
    assert "model mnist already exists" in capsys.readouterr().err
