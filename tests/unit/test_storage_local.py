"""`determined.common.storage` on a local file system (shared_fs, directory), `build`
for every type, and the Core API's choices that do not need a cloud server: a cluster is
asked to delete, a missing cloud library fails the trial at its start."""

import importlib.util
import pathlib

import pytest
from support.core_gateway import Server, set_trial_env
from support.undeletable import undeletable

import determined as det
from determined.common import storage
from determined.common.storage import DeleteResult, LocalStorageManager, StorageError

ID = "0b7c4a3e-2c55-4a4e-9d6f-3f1a2b3c4d5e"


def make_folder(root: pathlib.Path) -> pathlib.Path:
    (root / "code" / "lib").mkdir(parents=True)
    (root / "empty").mkdir()
    (root / "model.pt").write_bytes(b"m" * 1000)
    (root / "code" / "train.py").write_text("print('hi')\n")
    (root / "code" / "lib" / "util.py").write_text("x = 1\n")
    return root


@pytest.fixture
def manager(tmp_path: pathlib.Path) -> LocalStorageManager:
    built = storage.build({"type": "shared_fs", "host_path": str(tmp_path), "storage_path": "ckpts"})
    assert isinstance(built, LocalStorageManager)
    built.upload(make_folder(tmp_path / "source"), ID)
    return built


def test_build_picks_the_root_of_local_storage(tmp_path: pathlib.Path) -> None:
    def root(section: dict[str, str]) -> pathlib.Path | None:
        return storage.build(section).local_path(ID)

    assert root({"type": "shared_fs", "host_path": "/srv"}) == pathlib.Path("/srv") / ID
    assert (
        root({"type": "shared_fs", "host_path": "/srv", "storage_path": "c"}) == pathlib.Path("/srv/c") / ID
    )
    assert (
        root({"type": "shared_fs", "host_path": "/srv", "storage_path": "/srv/d"})
        == pathlib.Path("/srv/d") / ID
    )
    assert root({"type": "directory", "container_path": "/mnt/c"}) == pathlib.Path("/mnt/c") / ID


@pytest.mark.parametrize(
    ("section", "problem"),
    [
        ({"type": "shared_fs"}, "checkpoint_storage.host_path is required for shared_fs"),
        ({"type": "directory"}, "checkpoint_storage.container_path is required"),
        ({"type": "s3", "prefix": "p"}, "checkpoint_storage.bucket is required for s3"),
        ({"type": "s3", "bucket": "b", "prefix": "a/../b"}, "prefix must not contain"),
        ({"type": "hdfs"}, "type must be one of shared_fs, directory, s3, gcs, azure, got 'hdfs'"),
        ({}, "type must be one of"),
    ],
)
def test_a_bad_section_names_its_field(section: dict[str, str], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        storage.build(section)


@pytest.mark.parametrize(
    ("section", "module", "package"),
    [
        ({"type": "gcs", "bucket": "b"}, "google.cloud.storage", "google-cloud-storage"),
        (
            {"type": "azure", "container": "c", "connection_string": "x"},
            "azure.storage.blob",
            "azure-storage-blob",
        ),
    ],
)
def test_a_cloud_storage_without_its_library_names_the_package(
    section: dict[str, str], module: str, package: str
) -> None:
    if _installed(module):
        pytest.skip(f"{package} is installed here")
    with pytest.raises(ImportError, match=f"pip install {package}"):
        storage.build(section)


def test_init_strings_stand_for_sections(tmp_path: pathlib.Path) -> None:
    assert storage.section_from_string(str(tmp_path)) == {"type": "shared_fs", "host_path": str(tmp_path)}
    assert storage.section_from_string("s3://bkt/a/b") == {"type": "s3", "bucket": "bkt", "prefix": "a/b"}
    assert storage.section_from_string("gs://bkt") == {"type": "gcs", "bucket": "bkt", "prefix": None}
    with pytest.raises(ValueError, match="use a folder, s3://BUCKET"):
        storage.section_from_string("hdfs://x/y")


def test_upload_and_download_keep_folders_and_honour_the_selector(
    manager: LocalStorageManager, tmp_path: pathlib.Path
) -> None:
    assert manager.list_resources(ID) == {
        "code/": 0,
        "code/lib/": 0,
        "code/lib/util.py": 6,
        "code/train.py": 12,
        "empty/": 0,
        "model.pt": 1000,
    }
    manager.download(ID, tmp_path / "all")
    assert storage.local_resources(tmp_path / "all") == manager.list_resources(ID)
    manager.download(ID, tmp_path / "some", selector=lambda relpath: relpath.startswith("code/lib"))
    assert storage.local_resources(tmp_path / "some") == {"code/": 0, "code/lib/": 0, "code/lib/util.py": 6}
    manager.upload(tmp_path / "source", "other", paths=["model.pt", "code/lib/util.py"])
    assert manager.list_resources("other") == {
        "code/": 0,
        "code/lib/": 0,
        "code/lib/util.py": 6,
        "model.pt": 1000,
    }


def test_read_streams_a_file_from_an_offset(manager: LocalStorageManager) -> None:
    assert list(manager.read(ID, "code/train.py")) == [b"print('hi')\n"]
    assert list(manager.read(ID, "model.pt", offset=100, chunk_bytes=400)) == [
        b"m" * 400,
        b"m" * 400,
        b"m" * 100,
    ]
    assert list(manager.read(ID, "model.pt", offset=1000)) == []
    assert list(manager.read(ID, "model.pt", offset=5000)) == []


@pytest.mark.parametrize(
    ("relpath", "error"),
    [
        ("missing.bin", FileNotFoundError),
        ("code/", FileNotFoundError),
        ("code", FileNotFoundError),
        ("../../etc/passwd", ValueError),
        ("/etc/passwd", ValueError),
    ],
)
def test_read_raises_at_the_call(manager: LocalStorageManager, relpath: str, error: type[Exception]) -> None:
    with pytest.raises(error):
        manager.read(ID, relpath)


def test_read_refuses_a_bad_range(manager: LocalStorageManager) -> None:
    with pytest.raises(ValueError, match="cannot read from offset -1"):
        manager.read(ID, "model.pt", offset=-1)
    with pytest.raises(ValueError, match="in chunks of 0 bytes"):
        manager.read(ID, "model.pt", chunk_bytes=0)


def test_deleting_everything_removes_the_checkpoint_and_is_idempotent(manager: LocalStorageManager) -> None:
    assert manager.delete(ID) == DeleteResult(remaining={}, errors=[], bytes_freed=1018)
    assert not manager.root.joinpath(ID).exists()
    assert manager.delete(ID) == DeleteResult()
    assert manager.list_resources(ID) == {}


def test_deleting_globs_keeps_the_rest(manager: LocalStorageManager) -> None:
    result = manager.delete(ID, ["**/*.py", "code/lib"])
    assert result == DeleteResult(remaining={"code/": 0, "empty/": 0, "model.pt": 1000}, bytes_freed=18)
    assert manager.list_resources(ID) == result.remaining


def test_a_file_the_storage_refuses_to_delete_is_reported_and_left(manager: LocalStorageManager) -> None:
    stuck = manager.root / ID / "code" / "lib" / "util.py"
    with undeletable(stuck):
        result = manager.delete(ID)
    assert result.remaining == {"code/": 0, "code/lib/": 0, "code/lib/util.py": 6}
    assert [error.split(":")[0] for error in result.errors] == ["code/lib/util.py"]
    assert result.bytes_freed == 1012
    assert manager.delete(ID) == DeleteResult(bytes_freed=6)  # once the storage lets it go


def test_a_missing_checkpoint(manager: LocalStorageManager, tmp_path: pathlib.Path) -> None:
    missing = "00000000-0000-0000-0000-000000000000"
    with pytest.raises(FileNotFoundError, match=f"checkpoint {missing} not found"):
        manager.download(missing, tmp_path / "x")
    assert manager.list_resources(missing) == {}
    assert manager.delete(missing) == DeleteResult()


def test_off_cluster_delete_raises_when_files_are_left(tmp_path: pathlib.Path) -> None:
    with det.core.init(checkpoint_storage=str(tmp_path / "store")) as core_context:
        with core_context.checkpoint.store_path({"steps_completed": 1}) as (path, storage_id):
            (path / "weights.bin").write_bytes(b"w")
        with undeletable(path / "weights.bin"), pytest.raises(StorageError, match="weights.bin"):
            core_context.checkpoint.delete(storage_id)
        core_context.checkpoint.delete(storage_id)
        assert not path.exists()
        with pytest.raises(FileNotFoundError, match=storage_id):
            core_context.checkpoint.delete(storage_id)


def test_on_a_cluster_delete_asks_the_cluster(
    gateway: Server, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The checkpoint service deletes the files and records it; the trial only asks."""
    set_trial_env(
        monkeypatch, gateway.port, {"checkpoint_storage": {"type": "shared_fs", "host_path": str(tmp_path)}}
    )
    try:
        with det.core.init() as core_context:
            with core_context.checkpoint.store_path({"steps_completed": 1}) as (path, storage_id):
                (path / "weights.bin").write_bytes(b"w")
            core_context.checkpoint.delete(storage_id)
    finally:
        det.get_cluster_info.cache_clear()
    assert gateway.gateway.deletions == [[storage_id]]
    assert (tmp_path / storage_id / "weights.bin").exists()


def test_a_trial_whose_storage_library_is_missing_fails_at_start(
    gateway: Server, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if _installed("google.cloud.storage"):
        pytest.skip("google-cloud-storage is installed here")
    set_trial_env(monkeypatch, gateway.port, {"checkpoint_storage": {"type": "gcs", "bucket": "b"}})
    try:
        with pytest.raises(
            ImportError, match="gcs checkpoint storage needs the google-cloud-storage package"
        ):
            det.core.init()
    finally:
        det.get_cluster_info.cache_clear()
    assert gateway.gateway.checkpoints == [] and gateway.gateway.calls == 0


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False
