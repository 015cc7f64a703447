"""Packing a context folder and extracting it again."""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from determined.common.context import ContextError, extract_context, pack_context
from determined.common.limits import MAX_CONTEXT_BYTES


def _names(archive: bytes) -> list[str]:
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        return tar.getnames()


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    return root


def test_pack_then_extract_gives_the_same_files(tmp_path: Path) -> None:
    source = _tree(
        tmp_path / "src", {"train.py": "print(1)", "pkg/model.py": "x = 1", "data/labels.txt": "a\nb"}
    )

    extract_context(pack_context(source), tmp_path / "out")

    assert (tmp_path / "out" / "train.py").read_text() == "print(1)"
    assert (tmp_path / "out" / "pkg" / "model.py").read_text() == "x = 1"
    assert (tmp_path / "out" / "data" / "labels.txt").read_text() == "a\nb"


def test_executable_bits_are_kept(tmp_path: Path) -> None:
    source = _tree(tmp_path / "src", {"startup-hook.sh": "echo hi", "plain.txt": ""})
    os.chmod(source / "startup-hook.sh", 0o755)
    os.chmod(source / "plain.txt", 0o644)

    extract_context(pack_context(source), tmp_path / "out")

    assert os.stat(tmp_path / "out" / "startup-hook.sh").st_mode & 0o777 == 0o755
    assert os.stat(tmp_path / "out" / "plain.txt").st_mode & 0o777 == 0o644


def test_default_ignores_leave_out_caches_and_tool_folders(tmp_path: Path) -> None:
    source = _tree(
        tmp_path / "src",
        {
            "train.py": "",
            "__pycache__/train.cpython-311.pyc": "",
            "pkg/__pycache__/m.pyc": "",
            "pkg/stale.pyc": "",
            "pkg/m.pyo": "",
            ".git/HEAD": "",
            ".vscode/settings.json": "",
            ".idea/x.xml": "",
            ".mypy_cache/x": "",
            "terraform.tfstate.backup": "",
            "shared_fs/ckpt": "",
            "deep/shared_fs/kept": "",
        },
    )

    assert _names(pack_context(source)) == [
        "deep",
        "deep/shared_fs",
        "deep/shared_fs/kept",
        "pkg",
        "train.py",
    ]


def test_detignore_uses_gitignore_rules_and_is_not_uploaded(tmp_path: Path) -> None:
    source = _tree(
        tmp_path / "src",
        {
            ".detignore": "# big things\ndata/\n*.ckpt\n!keep.ckpt\n/root_only.txt\n",
            "train.py": "",
            "data/big.bin": "",
            "model.ckpt": "",
            "keep.ckpt": "",
            "root_only.txt": "",
            "sub/root_only.txt": "",
            "sub/other.ckpt": "",
        },
    )

    assert _names(pack_context(source)) == ["keep.ckpt", "sub", "sub/root_only.txt", "train.py"]


def test_ignored_folders_are_not_entered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = _tree(tmp_path / "src", {".detignore": "secret/\n", "train.py": "", "secret/key": ""})
    listed: list[str] = []
    iterdir = Path.iterdir

    def recording_iterdir(folder: Path) -> Iterator[Path]:
        listed.append(folder.name)
        return iterdir(folder)

    monkeypatch.setattr(Path, "iterdir", recording_iterdir)

    assert _names(pack_context(source)) == ["train.py"]
    assert listed == ["src"]


def test_nested_detignore_files_are_ignored_as_rules_but_uploaded(tmp_path: Path) -> None:
    source = _tree(tmp_path / "src", {"sub/.detignore": "*.py\n", "sub/a.py": ""})

    assert _names(pack_context(source)) == ["sub", "sub/.detignore", "sub/a.py"]


def test_packing_is_deterministic(tmp_path: Path) -> None:
    source = _tree(tmp_path / "src", {"b.py": "b", "a.py": "a"})

    assert pack_context(source) == pack_context(source)


def test_an_empty_folder_packs_to_an_empty_archive(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()

    archive = pack_context(tmp_path / "empty")

    assert _names(archive) == []
    extract_context(archive, tmp_path / "out")
    assert list((tmp_path / "out").iterdir()) == []


def test_a_missing_folder_is_named(tmp_path: Path) -> None:
    with pytest.raises(ContextError, match="context folder '.*nowhere' does not exist"):
        pack_context(tmp_path / "nowhere")


def test_a_file_is_not_a_context_folder(tmp_path: Path) -> None:
    (tmp_path / "f.py").write_text("")

    with pytest.raises(ContextError, match="f.py' is not a directory"):
        pack_context(tmp_path / "f.py")


def test_too_large_a_context_lists_the_largest_files(tmp_path: Path) -> None:
    source = _tree(tmp_path / "src", {f"f{size}.bin": "x" * size for size in range(10, 80, 10)})

    with pytest.raises(ContextError) as raised:
        pack_context(source, max_size=200)

    message = str(raised.value)
    assert "add them to .detignore" in message
    listed = [line.split()[-1] for line in message.splitlines()[1:]]
    assert listed == ["f70.bin", "f60.bin", "f50.bin", "f40.bin", "f30.bin"]


def test_the_default_limit_is_95_mib_and_checked_before_reading(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    with (source / "weights.bin").open("wb") as sparse:  # takes no disk space
        sparse.truncate(MAX_CONTEXT_BYTES + 1)

    assert MAX_CONTEXT_BYTES == 95 * 1024 * 1024
    with pytest.raises(ContextError, match="weights.bin"):
        pack_context(source)


def test_ignored_files_do_not_count_towards_the_limit(tmp_path: Path) -> None:
    source = _tree(tmp_path / "src", {".detignore": "*.bin\n", "big.bin": "x" * 500, "train.py": "y"})

    assert _names(pack_context(source, max_size=100)) == ["train.py"]


def test_links_inside_the_folder_are_packed_as_their_files(tmp_path: Path) -> None:
    source = _tree(tmp_path / "src", {"real.py": "x = 1"})
    (source / "alias.py").symlink_to("real.py")
    (source / "dangling.py").symlink_to("missing.py")

    extract_context(pack_context(source), tmp_path / "out")

    assert (tmp_path / "out" / "alias.py").read_text() == "x = 1"
    assert not (tmp_path / "out" / "dangling.py").exists()


def test_included_files_and_folders_land_at_the_root_under_their_names(tmp_path: Path) -> None:
    context = _tree(tmp_path / "ctx", {"train.py": "x"})
    data = _tree(tmp_path / "shared" / "data", {"a.csv": "1", "cache.bin": "0", ".detignore": "*.bin\n"})
    config = _tree(tmp_path / "conf", {"model.json": "{}"}) / "model.json"
    archive = pack_context(context, includes=[data, config])
    assert _names(archive) == ["train.py", "data", "data/a.csv", "model.json"]


def test_includes_alone_make_a_context(tmp_path: Path) -> None:
    only = _tree(tmp_path / "lib", {"util.py": "u"})
    assert _names(pack_context(None, includes=[only])) == ["lib", "lib/util.py"]


def test_an_include_may_not_shadow_a_root_entry(tmp_path: Path) -> None:
    context = _tree(tmp_path / "ctx", {"data/x": "1"})
    other = _tree(tmp_path / "elsewhere" / "data", {"y": "2"})
    with pytest.raises(ContextError, match="more than one entry named 'data' at the root"):
        pack_context(context, includes=[other])


def test_a_missing_include_is_named(tmp_path: Path) -> None:
    with pytest.raises(ContextError, match="included path .*nope.* does not exist"):
        pack_context(None, includes=[tmp_path / "nope"])
