"""A trial forked by the agent's fork server (`determined.exec.forkserver`) ends as
`python3 script.py` does: the same exit code, output and files, atexit handlers, finalizers
and unclosed files included. Each script runs both ways, in folders of its own, and the two
runs are compared. Then: each child gets its own /tmp."""

import asyncio
import os
import pwd
import shutil
import sys
import tempfile
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from services.agent.runner import ForkServer, TrialProcess
from services.common.os_users import OsUser

TRIAL_USER = "determined-trial"

SCRIPTS = {
    "atexit": """
        import atexit
        atexit.register(lambda: open("atexit.txt", "w").write("ran"))
    """,
    "a buffered file never closed": """
        kept = open("buffered.txt", "w")
        kept.write("written, never flushed or closed")
    """,
    # mtime=0: the header of two runs a second apart is the same.
    "a gzip file never closed": """
        import gzip, io
        kept = io.TextIOWrapper(gzip.GzipFile("data.gz", "wb", mtime=0))
        kept.write("needs its trailer")
    """,
    "finalizers": """
        import weakref
        class Model:
            def __del__(self, open=open):  # builtins are gone by the end of a teardown
                open("del.txt", "w").write("__del__ ran")
        model = Model()
        weakref.finalize(model, lambda: open("finalize.txt", "w").write("finalize ran"))
    """,
    "logging to a file": """
        import logging
        logging.basicConfig(filename="log.txt", level=logging.INFO)
        logging.info("a line")
    """,
    "a thread that finishes later": """
        import threading, time
        def work():
            time.sleep(0.3)
            open("thread.txt", "w").write("done")
        threading.Thread(target=work).start()
        print("main done")
    """,
    "sys.exit(3)": """
        import sys
        print("out"); print("err", file=sys.stderr)
        sys.exit(3)
    """,
    "sys.exit with a message": """
        import sys
        sys.exit("bad input")
    """,
    "an uncaught exception": """
        def inner():
            raise ValueError("broken")
        inner()
    """,
    "KeyboardInterrupt": """
        import atexit
        atexit.register(lambda: open("atexit.txt", "w").write("ran"))
        raise KeyboardInterrupt
    """,
    "a syntax error": """
        def (
    """,
    "os._exit(5)": """
        import os
        open("before.txt", "w").write("x")
        os._exit(5)
    """,
    "its own sys.path[0], argv and __main__": """
        import sys, __main__
        print(sys.argv, sys.path[0] == __import__("os").getcwd(), __name__, __main__.__file__)
        print(sorted(k for k in vars(__main__) if k.startswith("__")))
    """,
}


@pytest.fixture(scope="module")
async def fork_server() -> AsyncIterator[ForkServer]:
    server = ForkServer(preload=("json",))
    try:
        yield server
    finally:
        await server.close()


def _environment() -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", ""), "PYTHONUNBUFFERED": "1", "LANG": "C.UTF-8"}


async def _outcome(process: TrialProcess, folder: Path) -> tuple[object, ...]:
    assert process.stdout is not None and process.stderr is not None
    out, err = await asyncio.gather(process.stdout.read(), process.stderr.read())
    code = await process.wait()
    files = {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.name != "train.py"}
    # The runs' folders differ: compare what they printed with the folder's name taken out.
    return code, out.replace(str(folder).encode(), b"F"), err.replace(str(folder).encode(), b"F"), files


async def _fresh(folder: Path) -> tuple[object, ...]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "train.py",
        cwd=folder,
        env=_environment(),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    return await _outcome(process, folder)


async def _forked(server: ForkServer, folder: Path) -> tuple[object, ...]:
    return await _outcome(await server.spawn(["train.py"], folder, _environment()), folder)


@pytest.mark.parametrize("name", list(SCRIPTS))
async def test_a_forked_trial_ends_as_a_fresh_interpreter(
    fork_server: ForkServer, tmp_path: Path, name: str
) -> None:
    runs = []
    for way in ("fresh", "forked"):
        folder = tmp_path / way
        folder.mkdir()
        (folder / "train.py").write_text(textwrap.dedent(SCRIPTS[name]))
        runs.append(await (_fresh(folder) if way == "fresh" else _forked(fork_server, folder)))
    fresh, forked = runs
    assert forked == fresh
    if name == "a gzip file never closed":
        import gzip

        assert gzip.decompress(fresh[3]["data.gz"]) == b"needs its trailer"  # type: ignore[index]


@pytest.fixture(params=["root", TRIAL_USER])
async def tmp_case(
    request: pytest.FixtureRequest, fork_server: ForkServer
) -> AsyncIterator[tuple[ForkServer, Path]]:
    """A fork server and a folder its children may use (under the machine's /tmp): the test's
    own as it runs; or, run as root, one of an unprivileged user's (its children then make
    their /tmp through a user namespace)."""
    if request.param == "root":
        with tempfile.TemporaryDirectory(prefix="det-private-tmp-test-") as folder:
            yield fork_server, Path(folder)
        return
    if os.geteuid() != 0:
        pytest.skip("needs root, to run the fork server as another user")
    try:
        entry = pwd.getpwnam(TRIAL_USER)
    except KeyError:
        pytest.skip(f"no user {TRIAL_USER} (cluster-up as root creates it)")
    server = ForkServer(user=OsUser(TRIAL_USER, entry.pw_uid, entry.pw_gid, frozenset()))
    with tempfile.TemporaryDirectory(prefix="det-private-tmp-test-") as folder:
        os.chmod(folder, 0o755)
        os.chown(folder, entry.pw_uid, entry.pw_gid)
        try:
            yield server, Path(folder)
        finally:
            await server.close()


async def test_each_forked_trial_has_its_own_tmp(tmp_case: tuple[ForkServer, Path]) -> None:
    """Two children write the same literal /tmp path at once; each reads back its own, and the
    machine's /tmp has neither. The tree holding a kept path is still seen, at its path."""
    server, base = tmp_case
    name = f"det-private-tmp-test-{os.getpid()}"
    shared = base / "shared"
    shared.mkdir()
    shutil.chown(shared, base.stat().st_uid, base.stat().st_gid)
    script = textwrap.dedent(
        f"""
        import os, sys, time
        me = sys.argv[1]
        with open("/tmp/{name}", "x") as file:  # fails if the other's is there
            file.write(me)
        open(os.path.join({str(shared)!r}, me), "w").close()  # through the kept tree
        while len(os.listdir({str(shared)!r})) < 2:
            time.sleep(0.01)
        print(open("/tmp/{name}").read(), os.environ.get("TMPDIR"), os.getcwd() == sys.path[0])
        """
    )
    children = []
    for me in ("a", "b"):
        folder = base / me
        (folder / "tmp").mkdir(parents=True)
        (folder / "train.py").write_text(script)
        for path in (folder, folder / "tmp", folder / "train.py"):
            shutil.chown(path, base.stat().st_uid, base.stat().st_gid)
        tmp = {"folder": str(folder / "tmp"), "keep": [str(base)]}
        children.append(await server.spawn(["train.py", me], folder, _environment(), tmp=tmp))
    outputs = []
    for child in children:
        assert child.stdout is not None and child.stderr is not None
        out, err = await asyncio.gather(child.stdout.read(), child.stderr.read())
        outputs.append((await child.wait(), out.decode().strip(), err.decode()))
    assert outputs == [(0, "a None True", ""), (0, "b None True", "")]
    assert not Path(f"/tmp/{name}").exists()
    assert (base / "a" / "tmp" / name).read_text() == "a"
