"""The gateway's /proxy/<task id>/ against a real gateway (nats-server,
PostgreSQL) and real task servers on free ports: a small Starlette app
served by uvicorn (HTTP and WebSocket, under the task's prefix as JupyterLab
is) and a TCP echo server standing for a shell's sshd. The tasks are rows of
the read model made by appending their events (AllocationRequested with a
TaskLaunch, AllocationAssigned, AllocationReady), so the whole path is real.
One gateway for the module."""

import asyncio
import hashlib
import json
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import grpc
import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect
from support import module_gateway
from support.proxy_tasks import bearer, given_task, login
from support.security_gateway import PASSWORD, SECRET
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from deploy.local.servers import free_port, wait_for_port
from determined.common.passwords import salted_hash
from determined.proto import api_pb2, api_pb2_grpc
from services.common.eventstore import EventStore
from services.common.tokens import mint_allocation_token, task_proxy_token
from services.gateway.auth import Authenticator
from services.gateway.http.app import application
from services.gateway.http.proxy import TaskProxy, Timeouts
from services.gateway.http.server import HttpServer, listen
from services.gateway.server import Gateway

MiB = 1024 * 1024
# A bound on every wait: generous, so that only a hang fails.
DEADLINE_S = 60


@dataclass
class Backend:
    """A task's server: what it saw, and the events its streaming answers wait on."""

    port: int = 0
    release: asyncio.Event = field(default_factory=asyncio.Event)
    first_chunk: asyncio.Event = field(default_factory=asyncio.Event)
    closes: list[tuple[int, str]] = field(default_factory=list)


def backend_app(backend: Backend) -> Starlette:
    async def echo(request: Request) -> Response:
        body = await request.body()
        return JSONResponse(
            {
                "method": request.method,
                "raw_path": request.scope["raw_path"].decode(),
                "query": request.scope["query_string"].decode(),
                "headers": [[k.decode(), v.decode()] for k, v in request.scope["headers"]],
                "body": body.decode(),
            },
            headers={"x-task": "yes"},
        )

    async def upload(request: Request) -> Response:
        digest, size = hashlib.sha256(), 0
        async for chunk in request.stream():
            if chunk:
                backend.first_chunk.set()
            digest.update(chunk)
            size += len(chunk)
        return JSONResponse({"size": size, "sha256": digest.hexdigest()})

    async def download(request: Request) -> Response:
        async def chunks() -> AsyncIterator[bytes]:
            yield b"a" * (64 * 1024)
            await backend.release.wait()  # the rest only once the client has read the start
            yield b"b" * (MiB - 64 * 1024)

        return StreamingResponse(chunks(), media_type="application/octet-stream")

    async def cookies(request: Request) -> Response:
        answer = Response("ok")
        answer.set_cookie("det_session", "from-the-task", path="/")
        answer.set_cookie("_xsrf", "kept", path="/")
        return answer

    async def ws(websocket: WebSocket) -> None:
        offered = websocket.scope.get("subprotocols") or []
        await websocket.accept(subprotocol=offered[-1] if offered else None)
        try:
            while True:
                message = await websocket.receive()
                if message["type"] == "websocket.disconnect":
                    backend.closes.append((message["code"], message.get("reason") or ""))
                    return
                if message.get("text", "").startswith("close:"):
                    await websocket.close(int(message["text"][6:]), "bye")
                    return
                if message.get("text") == "headers":
                    await websocket.send_text(
                        json.dumps([[k.decode(), v.decode()] for k, v in websocket.scope["headers"]])
                    )
                elif message.get("bytes") is not None:
                    await websocket.send_bytes(message["bytes"])
                else:
                    await websocket.send_text(message["text"])
        except WebSocketDisconnect:
            pass

    prefix = "/proxy/{task_id}"
    return Starlette(
        routes=[
            Route(
                prefix + "/echo/{rest:path}",
                echo,
                methods=["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"],
            ),
            Route(prefix + "/upload", upload, methods=["POST"]),
            Route(prefix + "/download", download),
            Route(prefix + "/cookies", cookies),
            WebSocketRoute(prefix + "/ws", ws),
        ]
    )


@dataclass(frozen=True)
class Users:
    admin: str
    alice: str
    mallory: str


@dataclass(frozen=True)
class Tasks:
    """alice's tasks, each in the state its name says."""

    notebook: str
    starting: str
    ended: str
    refusing: str
    silent: str
    shell: str
    command: str


module_namespace = module_gateway.module_namespace
gateway = module_gateway.gateway
store = module_gateway.store


@pytest.fixture(scope="module")
async def backend() -> AsyncIterator[Backend]:
    served = Backend()
    server = await HttpServer.start(backend_app(served), listen("127.0.0.1", 0))
    served.port = server.port
    yield served
    await server.stop()


@pytest.fixture(scope="module")
async def sshd() -> AsyncIterator[int]:
    """A TCP server standing for a shell's sshd: echoes bytes; closes after "bye"."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
            if data.endswith(b"bye"):
                break
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    server.close()


@pytest.fixture(scope="module")
async def silent() -> AsyncIterator[int]:
    """A server that takes connections and never answers."""
    held: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        await reader.read()

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    for writer in held:
        writer.close()
    server.close()


@pytest.fixture(scope="module")
async def users(gateway: Gateway) -> Users:
    assert gateway.http is not None
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{gateway.http.port}", timeout=30) as http:
        admin = await login(http, "admin", PASSWORD)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{gateway.port}") as channel:
            api = api_pb2_grpc.DeterminedStub(channel)
            for name in ("alice", "mallory"):
                request = api_pb2.CreateUserRequest(
                    username=name, password=salted_hash(PASSWORD), is_hashed=True
                )
                await api.CreateUser(request, metadata=tuple(bearer(admin).items()))
        return Users(admin, await login(http, "alice", PASSWORD), await login(http, "mallory", PASSWORD))


@pytest.fixture(scope="module")
async def tasks(store: EventStore, gateway: Gateway, backend: Backend, sshd: int, silent: int) -> Tasks:
    closed_port = free_port()
    return Tasks(
        notebook=await given_task(store, gateway, "NOTEBOOK", ready_at=f"127.0.0.1:{backend.port}"),
        starting=await given_task(store, gateway, "NOTEBOOK"),
        ended=await given_task(
            store, gateway, "TENSORBOARD", ready_at=f"127.0.0.1:{backend.port}", exit_code=1
        ),
        refusing=await given_task(store, gateway, "NOTEBOOK", ready_at=f"127.0.0.1:{closed_port}"),
        silent=await given_task(store, gateway, "TENSORBOARD", ready_at=f"127.0.0.1:{silent}"),
        shell=await given_task(store, gateway, "SHELL", ready_at=f"127.0.0.1:{sshd}"),
        command=await given_task(store, gateway, "COMMAND"),
    )


@pytest.fixture
def base(gateway: Gateway) -> str:
    assert gateway.http is not None
    return f"127.0.0.1:{gateway.http.port}"


def header(headers: list[list[str]], name: str) -> list[str]:
    return [value for key, value in headers if key == name]


# -- HTTP ----------------------------------------------------------------------------------


async def test_a_request_reaches_the_task_with_its_path_and_query_and_none_of_the_users_credentials(
    http: httpx.AsyncClient, users: Users, tasks: Tasks, base: str
) -> None:
    path = f"/proxy/{tasks.notebook}/echo/a%2Fb/c%20d"
    answer = await http.put(
        path + "?x=1&y=%20z",
        content=b"the body",
        headers={
            **bearer(users.alice),
            "cookie": f"_xsrf=abc; det_session={users.alice}",
        },
    )
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-task"] == "yes"
    seen = answer.json()
    assert (seen["method"], seen["raw_path"], seen["query"], seen["body"]) == (
        "PUT",
        path,
        "x=1&y=%20z",
        "the body",
    )
    headers = seen["headers"]
    assert header(headers, "authorization") == [f"token {task_proxy_token(SECRET, tasks.notebook)}"]
    assert header(headers, "cookie") == ["_xsrf=abc"]
    assert header(headers, "host") == [base]
    assert header(headers, "x-forwarded-host") == [base]
    assert header(headers, "x-forwarded-proto") == ["http"]
    assert header(headers, "x-forwarded-for") == ["127.0.0.1"]
    for method in ("GET", "HEAD", "POST", "PATCH", "DELETE", "OPTIONS"):
        other = await http.request(method, path, headers=bearer(users.alice))
        assert other.status_code == 200, (method, other.text)
        if method != "HEAD":
            assert other.json()["method"] == method


async def test_without_the_slash_the_task_address_redirects_to_its_folder(
    http: httpx.AsyncClient, users: Users, tasks: Tasks
) -> None:
    answer = await http.get(f"/proxy/{tasks.notebook}", headers=bearer(users.alice))
    assert answer.status_code in (301, 307) and answer.headers["location"].endswith(
        f"/proxy/{tasks.notebook}/"
    )


async def test_bodies_stream_both_ways_without_being_held_whole(
    http: httpx.AsyncClient, users: Users, tasks: Tasks, backend: Backend
) -> None:
    # The answer: its first part arrives while the task still holds back the rest.
    async with asyncio.timeout(DEADLINE_S):
        async with http.stream(
            "GET", f"/proxy/{tasks.notebook}/download", headers=bearer(users.alice)
        ) as answer:
            assert answer.status_code == 200
            received = b""
            async for chunk in answer.aiter_bytes():
                received += chunk
                if len(received) >= 64 * 1024:
                    backend.release.set()
        assert len(received) == MiB and received == b"a" * (64 * 1024) + b"b" * (MiB - 64 * 1024)

    # The request: its first part reaches the task before the client sends the rest.
    parts = [b"x" * (64 * 1024), b"y" * (3 * MiB)]

    async def body() -> AsyncIterator[bytes]:
        yield parts[0]
        await backend.first_chunk.wait()
        yield parts[1]

    async with asyncio.timeout(DEADLINE_S):
        answer = await http.post(
            f"/proxy/{tasks.notebook}/upload", content=body(), headers=bearer(users.alice)
        )
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "size": len(b"".join(parts)),
        "sha256": hashlib.sha256(b"".join(parts)).hexdigest(),
    }


async def test_a_browser_logs_in_and_opens_the_task_with_the_cookie_alone(
    http: httpx.AsyncClient, tasks: Tasks, base: str
) -> None:
    answer = await http.post(
        "/api/v1/auth/login", json={"username": "alice", "password": salted_hash(PASSWORD), "isHashed": True}
    )
    cookie = answer.headers["set-cookie"]
    token = answer.json()["token"]
    assert cookie.startswith(f"det_session={token};")
    attributes = {part.strip().split("=")[0].lower() for part in cookie.split(";")[1:]}
    assert {"httponly", "max-age", "path", "samesite"} <= attributes and "secure" not in attributes
    assert "Path=/proxy/" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")

    opened = await http.get(f"/proxy/{tasks.notebook}/echo/", headers={"cookie": f"det_session={token}"})
    assert opened.status_code == 200, opened.text
    assert header(opened.json()["headers"], "cookie") == []
    # A page of the gateway's own origin may ride on the cookie; another site's may not.
    same = await http.post(
        f"/proxy/{tasks.notebook}/echo/",
        headers={"cookie": f"det_session={token}", "origin": f"http://{base}"},
    )
    assert same.status_code == 200
    other = await http.post(
        f"/proxy/{tasks.notebook}/echo/",
        headers={"cookie": f"det_session={token}", "origin": "http://evil.example"},
    )
    assert other.status_code == 403 and "may not use the login cookie" in other.json()["message"]
    # No /api/v1 route takes the cookie.
    assert (await http.get("/api/v1/me", headers={"cookie": f"det_session={token}"})).status_code == 401

    # A task cannot set the gateway's cookie; its own cookies pass.
    set_by_task = await http.get(
        f"/proxy/{tasks.notebook}/cookies", headers={"cookie": f"det_session={token}"}
    )
    assert set_by_task.headers.get_list("set-cookie") == ["_xsrf=kept; Path=/; SameSite=lax"]

    logout = await http.post("/api/v1/auth/logout", headers=bearer(token))
    assert logout.status_code == 200
    cleared = logout.headers["set-cookie"]
    assert cleared.startswith('det_session="";') and "Max-Age=0" in cleared and "Path=/proxy/" in cleared
    after = await http.get(f"/proxy/{tasks.notebook}/echo/", headers={"cookie": f"det_session={token}"})
    assert after.status_code == 401


async def test_who_may_open_a_task(
    http: httpx.AsyncClient, users: Users, tasks: Tasks, store: EventStore
) -> None:
    path = f"/proxy/{tasks.notebook}/echo/"
    nobody = await http.get(path)
    assert nobody.status_code == 401 and "not logged in" in nobody.json()["message"]
    browser = await http.get(path, headers={"accept": "text/html,application/xhtml+xml"})
    assert browser.status_code == 401 and browser.headers["content-type"].startswith("text/html")
    assert f'href="/#/login?next=/proxy/{tasks.notebook}/echo/"' in browser.text
    assert (await http.get(path, headers=bearer("not-a-token"))).status_code == 401

    mallory = await http.get(path, headers=bearer(users.mallory))
    assert mallory.status_code == 403
    assert mallory.json()["message"] == (
        f"task {tasks.notebook} belongs to alice: only its owner or an admin may open it, and mallory is neither"
    )
    assert (await http.get(path, headers=bearer(users.admin))).status_code == 200

    allocation_token = mint_allocation_token(SECRET, 1, "1.1")
    as_trial = await http.get(path, headers={"x-allocation-token": allocation_token})
    assert as_trial.status_code == 403 and "allocation token" in as_trial.json()["message"]
    assert (await http.get(path, headers=bearer(allocation_token))).status_code == 401

    unknown = str(uuid.uuid4())
    missing = await http.get(f"/proxy/{unknown}/", headers=bearer(users.alice))
    assert missing.status_code == 404 and missing.json()["message"] == f"task {unknown} not found"
    malformed = await http.get("/proxy/not-a-task-id/", headers=bearer(users.alice))
    assert malformed.status_code == 400 and "is not a task id" in malformed.json()["message"]


async def test_a_task_that_cannot_answer_is_a_502_naming_it(
    http: httpx.AsyncClient, users: Users, tasks: Tasks
) -> None:
    said = {}
    for name in ("starting", "ended", "refusing", "command"):
        task_id = getattr(tasks, name)
        answer = await http.get(f"/proxy/{task_id}/", headers=bearer(users.alice))
        assert answer.status_code == 502, (name, answer.text)
        said[name] = answer.json()["message"]
        assert task_id in said[name]
    assert said["starting"].endswith("is not ready yet (it is STARTING); try again once it is RUNNING")
    # How it ended, in the read model's words (features/tasks/queries.py's exit_summary).
    assert said["ended"].startswith(f"tensorboard {tasks.ended} has ended (TERMINATED): ")
    assert said["ended"].endswith("exited with code 1")
    assert said["refusing"].startswith(f"notebook {tasks.refusing} (RUNNING) did not answer at 127.0.0.1:")
    assert said["command"].endswith("runs no server to open (it is RUNNING)")
    shell = await http.get(f"/proxy/{tasks.shell}/", headers=bearer(users.alice))
    assert shell.status_code == 400 and "SSH connection over a WebSocket" in shell.json()["message"]


async def test_a_tensorboard_nobody_opens_is_killed_after_its_idle_timeout(
    store: EventStore, gateway: Gateway, backend: Backend
) -> None:
    """The gateway's own proxy looks for idle TensorBoards while it serves (whether one in
    use is kept: tests/unit/test_tensorboard_idle.py)."""
    task_id = await given_task(
        store,
        gateway,
        "TENSORBOARD",
        ready_at=f"127.0.0.1:{backend.port}",
        config_json=json.dumps({"idle_timeout": "1s"}),
    )
    async with asyncio.timeout(DEADLINE_S):
        while (stored := await store.last_event(f"allocation/{task_id}.1")) is not None and (
            stored.envelope.WhichOneof("payload") != "allocation_kill_requested"
        ):
            await asyncio.sleep(0.2)
    assert stored is not None
    assert stored.envelope.actor == "service:gateway"
    assert stored.envelope.allocation_kill_requested.reason == (
        "idle_timeout: nobody opened it through the gateway for 1s"
    )


async def test_a_task_that_stops_answering_is_a_502_once_the_read_timeout_passes(
    gateway: Gateway, users: Users, tasks: Tasks, silent: int
) -> None:
    """The gateway's timeouts are minutes; this proxy's, over the same read models, a moment."""
    authenticator = Authenticator(SECRET, gateway.user_directory)
    proxy = TaskProxy(
        authenticator.authenticate,
        gateway.api.tasks.proxy_target,
        SECRET,
        gateway.api.tasks.stop_idle_tensorboards,
        Timeouts(connect_s=5, read_s=0.2),
    )
    server = await HttpServer.start(
        application(proxy.routes(), lifespan=proxy.running), listen("127.0.0.1", 0)
    )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}", timeout=DEADLINE_S) as http:
            answer = await http.get(f"/proxy/{tasks.silent}/", headers=bearer(users.alice))
            assert answer.status_code == 502
            assert answer.json()["message"] == (
                f"tensorboard {tasks.silent} (RUNNING) did not answer at 127.0.0.1:{silent}: no answer within 0.2 s"
            )
            with pytest.raises(InvalidStatus) as refused:
                async with connect(
                    f"ws://127.0.0.1:{server.port}/proxy/{tasks.silent}/",
                    additional_headers=bearer(users.alice),
                ):
                    pass
            assert refused.value.response.status_code == 502
    finally:
        await server.stop()


# -- WebSocket -----------------------------------------------------------------------------


async def test_a_websocket_passes_frames_subprotocols_and_close_codes_both_ways(
    users: Users, tasks: Tasks, backend: Backend, base: str
) -> None:
    uri = f"ws://{base}/proxy/{tasks.notebook}/ws?session=1"
    async with asyncio.timeout(DEADLINE_S):
        async with connect(
            uri, additional_headers=bearer(users.alice), subprotocols=["v1", "v2"], max_size=4 * MiB
        ) as ws:
            assert ws.subprotocol == "v2"
            await ws.send("hello")
            assert await ws.recv() == "hello"
            await ws.send(b"\x00\x01binary")
            assert await ws.recv() == b"\x00\x01binary"
            big = bytes(range(256)) * 8192  # 2 MiB in one frame
            await ws.send(big)
            assert await ws.recv() == big
            await ws.send("headers")
            seen = json.loads(str(await ws.recv()))
            assert header(seen, "authorization") == [f"token {task_proxy_token(SECRET, tasks.notebook)}"]
            await ws.send("close:4001")
            with pytest.raises(ConnectionClosed):
                await ws.recv()
            assert ws.close_code == 4001 and ws.close_reason == "bye"

        async with connect(uri, additional_headers=bearer(users.alice)) as ws:
            assert ws.subprotocol is None
            await ws.send("ping")
            assert await ws.recv() == "ping"
            await ws.close(4002, "done here")
        while (4002, "done here") not in backend.closes:
            await asyncio.sleep(0.02)


async def test_a_websocket_is_refused_as_http_is(users: Users, tasks: Tasks, base: str) -> None:
    async def status(path: str, headers: dict[str, str]) -> int:
        with pytest.raises(InvalidStatus) as refused:
            async with connect(f"ws://{base}{path}", additional_headers=headers):
                pass
        return refused.value.response.status_code

    ws = f"/proxy/{tasks.notebook}/ws"
    assert await status(ws, {}) == 401
    assert await status(ws, bearer(users.mallory)) == 403
    assert await status(ws, {"x-allocation-token": mint_allocation_token(SECRET, 1, "1.1")}) == 403
    cookie = {"cookie": f"det_session={users.alice}"}
    assert await status(ws, {**cookie, "origin": "http://evil.example"}) == 403
    assert await status(f"/proxy/{uuid.uuid4()}/ws", bearer(users.alice)) == 404
    assert await status(f"/proxy/{tasks.starting}/ws", bearer(users.alice)) == 502
    assert await status(f"/proxy/{tasks.refusing}/ws", bearer(users.alice)) == 502
    # The task's own refusal of the handshake (no such WebSocket there) passes as it is.
    assert await status(f"/proxy/{tasks.notebook}/no-such-socket", bearer(users.alice)) == 403
    async with connect(
        f"ws://{base}{ws}", additional_headers={**cookie, "origin": f"http://{base}"}
    ) as opened:
        await opened.send("with the cookie")
        assert await opened.recv() == "with the cookie"


async def test_a_shells_websocket_is_bridged_to_its_tcp_port(users: Users, tasks: Tasks, base: str) -> None:
    uri = f"ws://{base}/proxy/{tasks.shell}/"
    async with asyncio.timeout(DEADLINE_S):
        async with connect(uri, additional_headers=bearer(users.alice)) as ws:
            await ws.send(b"SSH-2.0-test\r\n")
            assert await received(ws, 14) == b"SSH-2.0-test\r\n"
            payload = bytes(range(256)) * 1024
            await ws.send(payload)
            assert await received(ws, len(payload)) == payload
            await ws.send(b"bye")  # sshd closes its side: the WebSocket closes normally
            assert await received(ws, 3) == b"bye"
            with pytest.raises(ConnectionClosed):
                await ws.recv()
            assert ws.close_code == 1000

        async with connect(uri, additional_headers=bearer(users.alice)) as ws:
            await ws.send("text")
            with pytest.raises(ConnectionClosed):
                await ws.recv()
            assert (
                ws.close_code == 1003 and ws.close_reason == "a shell's connection takes binary frames only"
            )

        with pytest.raises(InvalidStatus) as refused:
            async with connect(uri, additional_headers=bearer(users.mallory)):
                pass
        assert refused.value.response.status_code == 403


async def received(ws: ClientConnection, size: int) -> bytes:
    """`size` bytes of binary frames (TCP cuts the stream where it likes)."""
    data = b""
    while len(data) < size:
        frame = await ws.recv()
        assert isinstance(frame, bytes)
        data += frame
    return data


# -- a real JupyterLab ---------------------------------------------------------------------


@pytest.fixture
async def jupyter(
    store: EventStore, gateway: Gateway, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[str]:
    """alice's notebook: JupyterLab as the agent starts it (determined.exec.notebook, the task
    contract's variables, the token the gateway signs for it); its task id once it answers."""
    task_id, port = str(uuid.uuid4()), free_port()
    folder = tmp_path_factory.mktemp("notebook")
    environment = {
        **os.environ,
        "DET_TASK_HOST": "127.0.0.1",
        "DET_TASK_PORT": str(port),
        "DET_PROXY_PREFIX": f"/proxy/{task_id}/",
        "DET_TASK_TOKEN": task_proxy_token(SECRET, task_id),
        "HOME": str(folder),
        "JUPYTER_CONFIG_DIR": str(folder / "config"),
        "JUPYTER_RUNTIME_DIR": str(folder / "runtime"),
    }
    with open(folder / "jupyter.log", "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "determined.exec.notebook"],
            env=environment,
            cwd=folder,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        up = await asyncio.to_thread(wait_for_port, port, 180.0, process)
        assert up, (folder / "jupyter.log").read_text()
        await given_task(store, gateway, "NOTEBOOK", ready_at=f"127.0.0.1:{port}", task_id=task_id)
        yield task_id
    finally:
        process.terminate()
        process.wait(30)


@pytest.mark.slow
async def test_a_jupyterlab_kernel_runs_code_through_the_proxy(
    jupyter: str, users: Users, base: str, http: httpx.AsyncClient
) -> None:
    """As a browser: a login (its cookie kept), the notebook's page, a kernel, its WebSocket."""
    prefix = f"/proxy/{jupyter}/"
    async with httpx.AsyncClient(base_url=f"http://{base}", timeout=DEADLINE_S) as browser:
        await login(browser, "alice", PASSWORD)
        assert browser.cookies["det_session"]
        async with asyncio.timeout(180):
            while (await browser.get(prefix + "api/status")).status_code != 200:
                await asyncio.sleep(0.1)  # the port opens a moment before Jupyter answers
            page = await browser.get(prefix, follow_redirects=True)
            assert page.status_code == 200 and str(page.url).endswith(prefix + "lab")
            assert "JupyterLab" in page.text
            kernel = await browser.post(prefix + "api/kernels", json={"name": "python3"})
            assert kernel.status_code == 201, kernel.text
            channels = f"ws://{base}{prefix}api/kernels/{kernel.json()['id']}/channels"
            cookie = {"cookie": f"det_session={browser.cookies['det_session']}", "origin": f"http://{base}"}
            async with connect(channels, additional_headers=cookie) as ws:
                await ws.send(json.dumps(execute_request("print(6 * 7)")))
                while (message := json.loads(await ws.recv()))["msg_type"] != "stream":
                    pass
            assert message["content"] == {"name": "stdout", "text": "42\n"}
    assert (await http.get(prefix + "api/status", headers=bearer(users.mallory))).status_code == 403
    assert (await http.get(prefix + "api/status")).status_code == 401


def execute_request(code: str) -> dict[str, object]:
    """A Jupyter messaging (v5) execute_request, as JupyterLab sends it on a kernel's channels."""
    header = {
        "msg_id": uuid.uuid4().hex,
        "msg_type": "execute_request",
        "session": uuid.uuid4().hex,
        "username": "alice",
        "version": "5.3",
        "date": "",
    }
    content = {
        "code": code,
        "silent": False,
        "store_history": False,
        "user_expressions": {},
        "allow_stdin": False,
    }
    return {
        "header": header,
        "parent_header": {},
        "metadata": {},
        "content": content,
        "channel": "shell",
        "buffers": [],
    }
