"""What of the machine's /tmp a process trial with a private /tmp still sees
(`determined.exec.private_tmp.kept_trees`, `services.agent.private_tmp.TrialTmp`)."""

import sys
import tempfile
from pathlib import Path

import pytest

from determined.exec.private_tmp import FOLDER, kept_trees, shared_note
from services.agent import private_tmp
from services.agent.private_tmp import HARNESS_FOLDER, TrialTmp


def test_kept_trees_are_the_first_folders_under_tmp_once_each() -> None:
    paths = ["/tmp/determined-agent/7.1.0", "/tmp/determined-agent-venv/bin", "/var/lib/x", "/tmp/ckpt/a"]
    assert kept_trees([*paths, "/tmp/determined-agent"]) == [
        "/tmp/determined-agent",
        "/tmp/determined-agent-venv",
        "/tmp/ckpt",
    ]
    assert kept_trees(["/var/lib/determined-es/agents", "/usr/bin"]) == []


def test_a_kept_path_that_is_tmp_itself_rules_a_private_tmp_out() -> None:
    with pytest.raises(ValueError, match="/tmp/ is the machine's /tmp"):
        kept_trees(["/tmp/"])


def test_links_are_resolved(tmp_path: Path) -> None:
    (tmp_path / "link").symlink_to("/tmp")
    with pytest.raises(ValueError, match="the machine's /tmp"):
        kept_trees([str(tmp_path / "link")])


@pytest.mark.parametrize(
    ("storage", "kept"),
    [
        (None, []),
        (
            {"type": "shared_fs", "host_path": "/tmp", "storage_path": "determined-checkpoint"},
            ["/tmp/determined-checkpoint"],
        ),
        ({"type": "shared_fs", "host_path": "/mnt/ckpt"}, ["/mnt/ckpt/"]),
        ({"type": "s3", "bucket": "b"}, []),
        ({"type": "shared_fs", "host_path": 3}, []),
    ],
)
def test_an_allocations_tmp_keeps_its_folder_python_and_shared_fs_storage(
    storage: object, kept: list[str]
) -> None:
    config = {"checkpoint_storage": storage} if storage is not None else {}
    tmp = TrialTmp.of(Path("/w/7.1.0"), Path("/w"), "/venv/bin", config)
    assert tmp.folder == Path("/w/7.1.0") / FOLDER
    assert tmp.keep == ["/w", "/venv/bin", sys.prefix, sys.base_prefix, HARNESS_FOLDER, *kept]
    assert Path(HARNESS_FOLDER, "determined", "__init__.py").is_file()
    assert tmp.request() == {"folder": "/w/7.1.0/tmp", "keep": tmp.keep}


def test_the_shared_note_says_why_and_where_tmpdir_points() -> None:
    assert shared_note("unshare: Operation not permitted", "/w/7/tmp") == (
        "determined: this trial shares the machine's /tmp with other trials "
        "(no private /tmp: unshare: Operation not permitted); TMPDIR is /w/7/tmp"
    )


def test_the_probe_works_from_an_agent_whose_folder_is_under_tmp(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe's own /tmp keeps nothing: run from a folder under the machine's /tmp (a
    checkout cloned there), it must not try to return to it (it failed so, once, in CI)."""
    with tempfile.TemporaryDirectory(dir="/tmp") as folder:
        monkeypatch.chdir(folder)
        why = private_tmp._probe.__wrapped__()
    assert why == "" or "No such file" not in why, why
