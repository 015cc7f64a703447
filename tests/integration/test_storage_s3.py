"""s3 checkpoint storage against a real S3-compatible server (moto's, `s3_server`): the
backend itself, and the Core API storing, restoring and deleting checkpoints there."""

import pathlib
from typing import Any

import pytest
from support.s3_server import S3Server

import determined as det
from determined.common import storage
from determined.common.storage import DeleteResult, StorageError, StorageManager

ID = "0b7c4a3e-2c55-4a4e-9d6f-3f1a2b3c4d5e"
FILES = {
    "code/": 0,
    "code/lib/": 0,
    "code/lib/util.py": 6,
    "code/train.py": 12,
    "empty/": 0,
    "model.pt": 3_000_000,
}


def make_folder(root: pathlib.Path) -> pathlib.Path:
    (root / "code" / "lib").mkdir(parents=True)
    (root / "empty").mkdir()
    (root / "model.pt").write_bytes(bytes(range(250)) * 12_000)
    (root / "code" / "train.py").write_text("print('hi')\n")
    (root / "code" / "lib" / "util.py").write_text("x = 1\n")
    return root


@pytest.fixture
def section(s3_server: S3Server) -> dict[str, Any]:
    return s3_server.storage(prefix="/team/ckpts/")


@pytest.fixture
def manager(section: dict[str, Any], tmp_path: pathlib.Path) -> StorageManager:
    built = storage.build(section)
    built.upload(make_folder(tmp_path / "source"), ID)
    return built


def test_a_checkpoint_is_one_object_per_file_under_prefix_and_id(
    manager: StorageManager, section: dict[str, Any], s3_server: S3Server
) -> None:
    assert s3_server.keys(section["bucket"]) == sorted(f"team/ckpts/{ID}/{relpath}" for relpath in FILES)
    assert manager.list_resources(ID) == FILES
    assert manager.local_path(ID) is None


def test_download_all_or_the_selected_files(manager: StorageManager, tmp_path: pathlib.Path) -> None:
    manager.download(ID, tmp_path / "all")
    assert storage.local_resources(tmp_path / "all") == FILES
    assert (tmp_path / "all" / "model.pt").read_bytes() == (tmp_path / "source" / "model.pt").read_bytes()
    manager.download(ID, tmp_path / "some", selector=lambda relpath: relpath.endswith(".py"))
    assert storage.local_resources(tmp_path / "some") == {
        "code/": 0,
        "code/lib/": 0,
        "code/lib/util.py": 6,
        "code/train.py": 12,
    }
    with pytest.raises(FileNotFoundError, match="checkpoint missing not found in s3://"):
        manager.download("missing", tmp_path / "none")


def test_upload_only_the_given_paths(manager: StorageManager, tmp_path: pathlib.Path) -> None:
    manager.upload(tmp_path / "source", "other", paths=["code/lib/util.py", "empty/"])
    assert manager.list_resources("other") == {"code/lib/util.py": 6, "empty/": 0}


def test_read_streams_a_file_from_an_offset(manager: StorageManager, tmp_path: pathlib.Path) -> None:
    original = (tmp_path / "source" / "model.pt").read_bytes()
    assert b"".join(manager.read(ID, "model.pt")) == original
    chunks = list(manager.read(ID, "model.pt", offset=1_000_000, chunk_bytes=1 << 20))
    assert b"".join(chunks) == original[1_000_000:] and max(len(c) for c in chunks) <= 1 << 20
    assert list(manager.read(ID, "model.pt", offset=len(original))) == []
    assert list(manager.read(ID, "code/train.py", offset=6)) == [b"'hi')\n"]
    with pytest.raises(FileNotFoundError, match="missing.bin does not exist"):
        manager.read(ID, "missing.bin")
    with pytest.raises(FileNotFoundError, match="is a folder"):
        manager.read(ID, "code/")
    with pytest.raises(ValueError, match="not a path inside a checkpoint"):
        manager.read(ID, "../other/model.pt")


def test_delete_globs_then_everything_idempotently(
    manager: StorageManager, section: dict[str, Any], s3_server: S3Server
) -> None:
    partial = manager.delete(ID, ["**/*.py", "code/lib"])
    assert partial == DeleteResult(remaining={"code/": 0, "empty/": 0, "model.pt": 3_000_000}, bytes_freed=18)
    assert manager.list_resources(ID) == partial.remaining
    assert manager.delete(ID) == DeleteResult(bytes_freed=3_000_000)
    assert s3_server.keys(section["bucket"]) == []
    assert manager.delete(ID) == DeleteResult()


def test_many_small_files_round_trip(section: dict[str, Any], tmp_path: pathlib.Path) -> None:
    source = tmp_path / "many"
    for index in range(300):
        (source / f"part{index % 7}").mkdir(parents=True, exist_ok=True)
        (source / f"part{index % 7}" / f"{index}.bin").write_bytes(str(index).encode())
    manager = storage.build(section)
    manager.upload(source, "many")
    manager.download("many", tmp_path / "back")
    assert storage.local_resources(tmp_path / "back") == storage.local_resources(source)
    assert manager.delete("many").bytes_freed == sum(storage.local_resources(source).values())


def test_an_unreachable_bucket_is_a_storage_error(s3_server: S3Server, tmp_path: pathlib.Path) -> None:
    manager = storage.build(dict(s3_server.storage(), bucket="no-such-bucket"))
    with pytest.raises(StorageError, match="NoSuchBucket"):
        manager.list_resources(ID)
    with pytest.raises(StorageError, match="NoSuchBucket"):
        manager.delete(ID)
    with pytest.raises(StorageError, match="s3://no-such-bucket"):
        manager.upload(make_folder(tmp_path / "source"), ID)


def test_the_standard_credential_chain_applies_without_keys(
    s3_server: S3Server, monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "from-the-environment")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    section = {"type": "s3", "bucket": s3_server.make_bucket(), "endpoint_url": s3_server.endpoint_url}
    manager = storage.build(section)
    manager.upload(make_folder(tmp_path / "source"), ID)
    assert manager.list_resources(ID) == FILES


def test_core_api_stores_restores_and_deletes_on_s3(
    section: dict[str, Any], s3_server: S3Server, tmp_path: pathlib.Path
) -> None:
    staging = tmp_path / "staging"
    with det.core.init(checkpoint_storage=section) as core_context:
        checkpoint = core_context.checkpoint
        checkpoint._staging = staging  # keep this test's files apart from other runs'
        with checkpoint.store_path({"steps_completed": 3, "note": "hi"}) as (path, storage_id):
            assert path.is_relative_to(staging)
            (path / "model").mkdir()
            (path / "model" / "weights.bin").write_bytes(b"w" * 2048)
        assert not path.exists()  # uploaded, then the staging copy is gone
        assert s3_server.keys(section["bucket"]) == [
            f"team/ckpts/{storage_id}/{relpath}"
            for relpath in ("metadata.json", "model/", "model/weights.bin")
        ]
        assert checkpoint.get_metadata(storage_id) == {"steps_completed": 3, "note": "hi"}

        with checkpoint.restore_path(storage_id) as restored:
            assert (restored / "model" / "weights.bin").read_bytes() == b"w" * 2048
        assert not restored.exists()
        with checkpoint.restore_path(
            storage_id, selector=lambda relpath: relpath == "metadata.json"
        ) as restored:
            assert list(storage.local_resources(restored)) == ["metadata.json"]
        checkpoint.download(storage_id, tmp_path / "copy", selector=lambda relpath: "weights" in relpath)
        assert storage.local_resources(tmp_path / "copy") == {"model/": 0, "model/weights.bin": 2048}

        copied = checkpoint.upload(
            tmp_path / "copy", {"steps_completed": 4}, selector=lambda p: p.endswith(".bin")
        )
        assert set(storage.build(section).list_resources(copied)) == {
            "metadata.json",
            "model/",
            "model/weights.bin",
        }

        checkpoint.delete(storage_id)
        checkpoint.delete(copied)
        assert s3_server.keys(section["bucket"]) == []
        with pytest.raises(FileNotFoundError, match=storage_id):
            checkpoint.get_metadata(storage_id)
        with pytest.raises(FileNotFoundError, match=storage_id), checkpoint.restore_path(storage_id):
            pass


def test_a_block_that_raises_stores_nothing(
    section: dict[str, Any], s3_server: S3Server, tmp_path: pathlib.Path
) -> None:
    with det.core.init(checkpoint_storage=section) as core_context:
        core_context.checkpoint._staging = tmp_path / "staging"
        with (
            pytest.raises(OSError, match="disk full"),
            core_context.checkpoint.store_path({"steps_completed": 1}) as (path, _),
        ):
            (path / "half.bin").write_bytes(b"h")
            raise OSError("disk full")
    assert s3_server.keys(section["bucket"]) == []
    assert list((tmp_path / "staging").rglob("*.bin")) == []


def test_an_upload_that_fails_leaves_nothing_behind(s3_server: S3Server, tmp_path: pathlib.Path) -> None:
    section = dict(s3_server.storage(), bucket="no-such-bucket")
    with det.core.init(checkpoint_storage=section) as core_context:
        core_context.checkpoint._staging = tmp_path / "staging"
        with (
            pytest.raises(StorageError, match="NoSuchBucket"),
            core_context.checkpoint.store_path({"steps_completed": 1}) as (path, _),
        ):
            (path / "weights.bin").write_bytes(b"w")
    assert list((tmp_path / "staging").rglob("*.bin")) == []
