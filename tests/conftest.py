"""Real servers for the whole test session: one nats-server (JetStream), one
PostgreSQL and, for the tests that ask, one S3-compatible server (moto's), each
started once on free ports in temporary folders. Tests
are kept apart by namespace (stream and subject names) and database name,
never by starting a server per test (buckets for S3). Never a mock of any."""

import contextlib
import os

# Before anything imports grpc: with fork support on, a child forked (not vforked: PostgreSQL
# started as another user when running as root) while a gRPC server or channel lives in this
# process restarts gRPC's poller, which `close_fds` then breaks before exec (grpc/grpc#43055).
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
import httpx
import pytest
from support.pg_server import new_database, running_postgres
from support.s3_server import S3Server, running_s3_server

import determined as det
from deploy.local.servers import NatsServer, PostgresServer, free_port
from determined.proto import api_pb2_grpc
from services.common.eventstore import EventStore

if TYPE_CHECKING:
    from services.gateway.server import Gateway


# Under pytest-xdist (`-n 4`; pyproject's addopts give `--dist loadfile --no-loadscope-reorder`) a
# worker takes the next whole file when it is nearly done with its own: files with a test marked
# so go first, in this order, so that no long file starts near the end and leaves one worker alone.
FIRST = ("chaos", "slow", "e2e")
# Folders whose files go to one worker together, as one file would: their tests share a cluster
# (and the browser tests one Chromium) started once for the session, rather than once on each
# worker that happens to take one of their files.
ONE_WORKER_FOLDERS = ("tests/browser/", "tests/compat/")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    from xdist.scheduler import LoadFileScheduling

    class LoadFolderOrFile(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            folder = next((f for f in ONE_WORKER_FOLDERS if nodeid.startswith(f)), None)
            return folder or super()._split_scope(nodeid)

    return LoadFolderOrFile(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files of chaos, slow and end-to-end tests first; each file's tests as written."""
    rank: dict[Path, int] = {}
    for item in items:
        marks = {mark.name for mark in item.iter_markers()}
        own = min((FIRST.index(name) for name in marks.intersection(FIRST)), default=len(FIRST))
        rank[item.path] = min(rank.get(item.path, own), own)
    items.sort(key=lambda item: rank[item.path])


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    """A test that failed while a local cluster served it shows the end of each part's log."""
    report = yield
    if report.failed and call.when == "call":
        for value in getattr(item, "funcargs", {}).values():
            cluster = getattr(value, "cluster", value)  # DeterminedCluster holds its Cluster
            if callable(getattr(cluster, "part_logs", None)):
                with contextlib.suppress(OSError):
                    report.sections.append(("the cluster's part logs", cluster.part_logs()))
    return report


@pytest.fixture(autouse=True)
def no_cached_cluster_info() -> None:
    """`det.get_cluster_info()` caches what the environment said (a task's never changes): each
    test starts with nothing cached, whatever the tests before it on this worker set (under
    xdist, which tests ran before differs from run to run)."""
    det.get_cluster_info.cache_clear()


@pytest.fixture(autouse=True)
def cli_config_folder(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """The det CLI's and the SDK's token cache (DET_CONFIG_DIR) in a folder of the test's
    own, never the user's ~/.config; DET_USER and DET_PASS of the shell left out."""
    monkeypatch.setenv("DET_CONFIG_DIR", str(tmp_path_factory.mktemp("det-config")))
    monkeypatch.delenv("DET_USER", raising=False)
    monkeypatch.delenv("DET_PASS", raising=False)


@pytest.fixture(scope="session")
def nats_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("nats")
    server = NatsServer(folder / "store", free_port(), folder / "nats.log")
    process = server.start()
    yield server.url
    process.terminate()
    process.wait(10)


@pytest.fixture(scope="session")
def postgres_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresServer]:
    with running_postgres("det-test-pg") as server:
        yield server


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """moto's S3-compatible server (its own process); `s3_server.storage()` gives a
    checkpoint_storage section on a new bucket, `make_bucket()` a bucket."""
    with running_s3_server() as server:
        yield server


@pytest.fixture
def namespace() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def event_store(nats_url: str, namespace: str) -> AsyncIterator[EventStore]:
    store = await EventStore.connect(nats_url, namespace)
    yield store
    await store.close()


@pytest.fixture
async def database_url(postgres_server: PostgresServer, namespace: str) -> str:
    """A fresh, empty database for one test (asyncpg-style URL)."""
    return await new_database(postgres_server, namespace)


@pytest.fixture
async def api(gateway: "Gateway") -> AsyncIterator[api_pb2_grpc.DeterminedStub]:
    """A stub on the module's own `gateway` fixture (each module that asks starts the gateway it needs)."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{gateway.port}") as channel:
        yield api_pb2_grpc.DeterminedStub(channel)


@pytest.fixture
async def http(gateway: "Gateway") -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client of the module's own `gateway` fixture's HTTP API."""
    assert gateway.http is not None
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{gateway.http.port}", timeout=30) as client:
        yield client
