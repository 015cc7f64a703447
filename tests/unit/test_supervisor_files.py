"""The files around the supervisor: status.json, the request mailbox, output
files rotated in place, and where PostgreSQL's files live as root."""

import json
import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest

from deploy.local import mailbox
from deploy.local.logrotate import rotate_if_large
from deploy.local.postgres_home import cluster_key, postgres_data_dir, prune_orphans, system_data_dir
from deploy.local.status import ClusterStatus, PartStatus, disk_bytes, read_status, write_status
from services.common.os_users import OsUser, closed_folder, may_enter
from services.gateway.features.agents.cluster_parts import cluster_parts

STATUS = ClusterStatus(
    supervisor_pid=12,
    updated_at=1700000000.5,
    parts=(
        PartStatus("nats-server", "running", 13, 0, "", 1700000000.25, 4096),
        PartStatus("gateway", "backoff", 0, 2, "killed by signal 9 (SIGKILL)\nthe end of x", 1699999999.0, 0),
    ),
)


# -- status.json --------------------------------------------------------------------------


def test_the_status_file_is_the_contract_shape(tmp_path: Path) -> None:
    path = tmp_path / "status.json"
    write_status(path, STATUS)
    document = json.loads(path.read_text())
    assert set(document) == {"supervisor_pid", "updated_at", "parts"}
    assert document["parts"][1] == {
        "name": "gateway",
        "state": "backoff",
        "pid": 0,
        "restarts": 2,
        "last_error": "killed by signal 9 (SIGKILL)\nthe end of x",
        "started_at": 1699999999.0,
        "disk_bytes": 0,
    }
    assert read_status(path) == STATUS
    assert [p.name for p in tmp_path.iterdir()] == ["status.json"]  # no temporary file left


def test_no_status_file_reads_as_none_and_unknown_fields_are_ignored(tmp_path: Path) -> None:
    path = tmp_path / "status.json"
    assert read_status(path) is None
    document = STATUS.to_json()
    document["parts"][0]["later_field"] = 1
    path.write_text(json.dumps(document))
    assert read_status(path) == STATUS


def test_the_gateway_reads_the_parts_from_the_status_file(tmp_path: Path) -> None:
    path = tmp_path / "status.json"
    assert cluster_parts(None) == [] and cluster_parts(path) == []
    path.write_text("{not json")
    assert cluster_parts(path) == []
    write_status(path, STATUS)
    nats, gateway = cluster_parts(path)
    assert (nats.name, nats.state, nats.pid, nats.disk_bytes, nats.started_at_ns) == (
        "nats-server",
        "running",
        13,
        4096,
        1700000000250000000,
    )
    assert (gateway.restarts, gateway.last_error) == (2, "killed by signal 9 (SIGKILL)\nthe end of x")


def test_disk_use_counts_files_and_folders_and_tolerates_missing_ones(tmp_path: Path) -> None:
    (tmp_path / "store" / "deep").mkdir(parents=True)
    (tmp_path / "store" / "deep" / "a").write_bytes(b"x" * 10000)
    (tmp_path / "one.log").write_bytes(b"y" * 5000)
    counted = disk_bytes([tmp_path / "store", tmp_path / "one.log", tmp_path / "missing"])
    assert counted >= 15000
    assert disk_bytes([tmp_path / "missing"]) == 0


# -- the mailbox ---------------------------------------------------------------------------


def test_requests_are_taken_once_oldest_first(tmp_path: Path) -> None:
    first = mailbox.Request("restart", ("postgres",))
    second = mailbox.Request("stop", ("gateway", "agent"))
    mailbox.post(tmp_path, first)
    [path] = mailbox.requests_dir(tmp_path).glob("*.json")
    os.utime(path, (1, 1))
    mailbox.post(tmp_path, second)
    assert mailbox.take(tmp_path) == [first, second]
    assert mailbox.take(tmp_path) == []
    assert mailbox.take(tmp_path / "nowhere") == []


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("{", "not JSON"),
        ('["restart"]', "the action must be one of restart, stop, start"),
        ('{"action": "kill", "parts": ["agent"]}', "the action must be one of"),
        ('{"action": "stop", "parts": []}', "parts must be a list of: nats-server, postgres"),
        ('{"action": "stop", "parts": ["gatway"]}', "parts must be a list of"),
        ('{"action": "stop", "parts": "agent"}', "parts must be a list of"),
    ],
)
def test_a_bad_request_is_refused_naming_what_is_wrong(text: str, error: str) -> None:
    with pytest.raises(mailbox.BadRequestError, match=error):
        mailbox.parse(text)


def test_a_bad_request_file_is_reported_by_name_and_removed(tmp_path: Path) -> None:
    folder = mailbox.requests_dir(tmp_path)
    folder.mkdir(parents=True)
    (folder / "odd.json").write_text('{"action": "dance", "parts": ["agent"]}')
    (folder / "partial.tmp").write_text("{")
    [error] = mailbox.take(tmp_path)
    assert isinstance(error, mailbox.BadRequestError) and str(error).startswith("odd.json: ")
    assert [p.name for p in folder.iterdir()] == ["partial.tmp"]  # not yet a request


# -- output files rotated in place ---------------------------------------------------------------


def test_an_output_file_is_copied_aside_and_emptied_past_its_limit(tmp_path: Path) -> None:
    path = tmp_path / "gateway.out"
    assert not rotate_if_large(path, 10, keep=2)
    with open(path, "ab") as writer:  # as the part holds it: O_APPEND
        writer.write(b"a" * 11)
        writer.flush()
        assert rotate_if_large(path, 10, keep=2)
        writer.write(b"b" * 11)
        writer.flush()
        assert path.read_bytes() == b"b" * 11  # the writer carried on at the start
        assert rotate_if_large(path, 10, keep=2)
        writer.write(b"c" * 11)
        writer.flush()
        assert rotate_if_large(path, 10, keep=2)
    assert (tmp_path / "gateway.out.1").read_bytes() == b"c" * 11
    assert (tmp_path / "gateway.out.2").read_bytes() == b"b" * 11
    assert not (tmp_path / "gateway.out.3").exists()
    assert path.read_bytes() == b""
    assert not rotate_if_large(path, 10, keep=2)


# -- PostgreSQL's files as root -----------------------------------------------------------------


USER = OsUser("determined_pg", uid=999, gid=995, groups=frozenset({995, 50}))


@pytest.mark.parametrize(
    ("mode", "owner", "group", "allowed"),
    [
        (0o700, 999, 0, True),
        (0o600, 999, 0, False),  # the user's own: the owner's bits
        (0o710, 0, 50, True),
        (0o701, 0, 50, False),  # one of its groups: the group's bits
        (0o711, 0, 0, True),
        (0o770, 0, 0, False),
        (0o755, 0, 0, True),  # others' bits
    ],
)
def test_who_may_enter_a_folder(mode: int, owner: int, group: int, allowed: bool) -> None:
    assert may_enter(stat.S_IFDIR | mode, owner, group, USER) is allowed


def test_the_first_closed_folder_on_the_way_is_found() -> None:
    stranger = OsUser("nobody-here", uid=2**30, gid=2**30, groups=frozenset({2**30}))
    top = Path(tempfile.mkdtemp(prefix="det-closed-", dir="/tmp"))  # /tmp: open to every user
    try:
        top.chmod(0o755)
        inner = top / "closed" / "data"
        inner.mkdir(parents=True)
        (top / "closed").chmod(0o700)
        assert closed_folder(inner, stranger) == top / "closed"
        assert closed_folder(top, stranger) is None
    finally:
        shutil.rmtree(top)


def test_each_cluster_gets_its_own_postgres_folder_under_the_system_place(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = system_data_dir(data, "cluster-1", home=tmp_path / "home")
    assert first == tmp_path / "home" / cluster_key(data, "cluster-1") / "postgres"
    assert stat.S_IMODE(first.parent.stat().st_mode) == 0o755
    assert json.loads((first.parent / "owner.json").read_text()) == {
        "data_dir": str(data),
        "cluster_id": "cluster-1",
    }
    assert system_data_dir(data, "cluster-1", home=tmp_path / "home") == first
    # The same folder holding a new cluster (its files deleted), or another folder: another place.
    assert (
        len(
            {
                first,
                system_data_dir(data, "cluster-2", tmp_path / "home"),
                system_data_dir(tmp_path / "other", "cluster-1", tmp_path / "home"),
            }
        )
        == 3
    )


def test_postgres_data_stays_in_the_data_folder_when_its_user_reaches_it(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    assert postgres_data_dir(data, "c1", None, home=tmp_path / "home") == data / "postgres"
    myself = OsUser("me", uid=os.geteuid(), gid=os.getegid(), groups=frozenset({os.getegid()}))
    assert postgres_data_dir(data, "c1", myself, home=tmp_path / "home") == data / "postgres"
    stranger = OsUser("nobody-here", uid=2**30, gid=2**30, groups=frozenset({2**30}))
    tmp_path.chmod(0o700)
    place = postgres_data_dir(data, "c1", stranger, home=tmp_path / "home")
    assert place == system_data_dir(data, "c1", home=tmp_path / "home")


def test_the_folders_of_clusters_that_are_gone_are_pruned(tmp_path: Path) -> None:
    home = tmp_path / "home"
    live, deleted, replaced = (tmp_path / name for name in ("live", "deleted", "replaced"))
    places = {
        name: system_data_dir(path, f"id-{name}", home)
        for name, path in (("live", live), ("deleted", deleted), ("replaced", replaced))
    }
    ids = {live: "id-live", replaced: "id-new"}  # `deleted` has none; `replaced` holds a new cluster
    removed = prune_orphans(ids.get, home)
    assert removed == sorted([places["deleted"].parent, places["replaced"].parent])
    assert [p.name for p in home.iterdir()] == [places["live"].parent.name]
    assert prune_orphans(ids.get, home) == []
    assert prune_orphans(ids.get, tmp_path / "no-home") == []
