"""Names inside a checkpoint, the same for every backend: storage ids, relative paths,
the globs of a partial deletion and what a deletion removes."""

import pathlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from determined.common.storage import glob_matcher, local_resources
from determined.common.storage._paths import check_globs, check_relpath, check_storage_id, to_delete

CHECKPOINT = {
    "metadata.json": 10,
    "model.pt": 100,
    "code/": 0,
    "code/train.py": 5,
    "code/lib/": 0,
    "code/lib/util.py": 7,
    "empty/": 0,
}


@pytest.mark.parametrize(
    ("glob", "matched"),
    [
        ("**/*", set(CHECKPOINT)),
        ("*", {"metadata.json", "model.pt", "code/", "empty/"}),
        ("*.pt", {"model.pt"}),
        ("**/*.py", {"code/train.py", "code/lib/util.py"}),
        ("code/*", {"code/train.py", "code/lib/"}),
        ("code/**", {"code/train.py", "code/lib/", "code/lib/util.py"}),
        ("code", {"code/"}),
        ("model.p?", {"model.pt"}),
        ("[mx]*", {"metadata.json", "model.pt"}),
        ("[!m]*", {"code/", "empty/"}),
        ("code/lib/util.py", {"code/lib/util.py"}),
    ],
)
def test_globs_match_like_a_shell_with_double_star_across_folders(glob: str, matched: set[str]) -> None:
    matches = glob_matcher([glob])
    assert {relpath for relpath in CHECKPOINT if matches(relpath)} == matched


@pytest.mark.parametrize("glob", ["", "../x", "a/../../b", "/etc/*"])
def test_globs_must_stay_inside_the_checkpoint(glob: str) -> None:
    with pytest.raises(ValueError, match="non-empty, relative and without '..'"):
        check_globs([glob])


@pytest.mark.parametrize("relpath", ["", "/abs", "../up", "a/../b", "a//b", "./a", "a/./b", "/"])
def test_a_relpath_must_name_something_inside_the_checkpoint(relpath: str) -> None:
    with pytest.raises(ValueError, match="not a path inside a checkpoint"):
        check_relpath(relpath)


@pytest.mark.parametrize("relpath", ["a", "a/b.txt", "dir/", "a b/c\\d", "..data"])
def test_ordinary_relpaths_are_accepted(relpath: str) -> None:
    assert check_relpath(relpath) == relpath


@pytest.mark.parametrize("storage_id", ["", ".", "..", "a/b", "../etc", "a\\b"])
def test_a_storage_id_is_one_folder_name(storage_id: str) -> None:
    with pytest.raises(ValueError, match="not a checkpoint storage_id"):
        check_storage_id(storage_id)


def test_deleting_everything_removes_files_first_then_folders_deepest_first() -> None:
    order = to_delete(CHECKPOINT, None)
    assert set(order) == set(CHECKPOINT) and to_delete(CHECKPOINT, []) == order
    files = [relpath for relpath in order if not relpath.endswith("/")]
    assert order[: len(files)] == sorted(files)
    assert order.index("code/lib/") < order.index("code/")


def test_a_folder_holding_a_kept_file_is_not_deleted() -> None:
    assert to_delete(CHECKPOINT, ["code/train.py", "code"]) == ["code/train.py"]
    assert to_delete(CHECKPOINT, ["**/*.py", "code"]) == [
        "code/lib/util.py",
        "code/train.py",
    ]  # code/lib/ kept
    assert to_delete(CHECKPOINT, ["code/**", "code"]) == [
        "code/lib/util.py",
        "code/train.py",
        "code/lib/",
        "code/",
    ]
    assert to_delete(CHECKPOINT, ["*.json"]) == ["metadata.json"]


def test_local_resources_list_files_with_sizes_and_folders_with_a_slash(tmp_path: pathlib.Path) -> None:
    (tmp_path / "code" / "lib").mkdir(parents=True)
    (tmp_path / "empty").mkdir()
    (tmp_path / "model.pt").write_bytes(b"x" * 100)
    (tmp_path / "code" / "lib" / "util.py").write_bytes(b"y" * 7)
    assert local_resources(tmp_path) == {
        "code/": 0,
        "code/lib/": 0,
        "code/lib/util.py": 7,
        "empty/": 0,
        "model.pt": 100,
    }


_names = st.text(alphabet="abc", min_size=1, max_size=2)


@st.composite
def _checkpoints(draw: st.DrawFn) -> dict[str, int]:
    """A checkpoint listing: files with their parent folders listed too."""
    files = draw(st.lists(st.lists(_names, min_size=1, max_size=3).map("/".join), max_size=8, unique=True))
    resources: dict[str, int] = {}
    for file in files:
        parts = file.split("/")
        folders = ["/".join(parts[:depth]) + "/" for depth in range(1, len(parts))]
        if any(f.rstrip("/") in files for f in folders) or any(
            other.startswith(file + "/") for other in files
        ):
            continue  # a name cannot be a file and a folder at once
        resources.update(dict.fromkeys(folders, 0))
        resources[file] = len(file)
    return resources


@given(_checkpoints(), st.lists(st.sampled_from(["*", "**/*", "a*", "**/b", "a/**", "?", "c/*"]), max_size=3))
def test_a_deletion_never_removes_the_folder_of_a_kept_file(
    resources: dict[str, int], globs: list[str]
) -> None:
    doomed = set(to_delete(resources, globs))
    kept = [relpath for relpath in resources if relpath not in doomed]
    for folder in doomed:
        assert not (folder.endswith("/") and any(relpath.startswith(folder) for relpath in kept))
    if not globs:
        assert doomed == set(resources)
