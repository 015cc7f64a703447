"""Tasks' pages on a port of their own (DET_PROXY_PORT; services/gateway/http/task_origin.py),
against a real gateway (nats-server, PostgreSQL) and a real task server: a browser is sent
there from the web UI's port, that port serves nothing else, and the web UI's page cannot be
framed by a task's."""

import json
from collections.abc import AsyncIterator

import grpc
import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket
from support import module_gateway
from support.proxy_tasks import bearer, given_task, login
from support.security_gateway import PASSWORD
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from determined.common.passwords import salted_hash
from determined.proto import api_pb2, api_pb2_grpc
from services.common.eventstore import EventStore
from services.gateway.http.server import HttpServer, listen
from services.gateway.server import Gateway

DEADLINE_S = 60


def task_server() -> Starlette:
    async def echo(request: Request) -> Response:
        return JSONResponse({"path": request.url.path, "query": request.url.query})

    async def answer(websocket: WebSocket) -> None:
        await websocket.accept()
        await websocket.send_text(await websocket.receive_text())
        await websocket.close()

    return Starlette(
        routes=[Route("/proxy/{task_id}/echo", echo), WebSocketRoute("/proxy/{task_id}/ws", answer)]
    )


module_namespace = module_gateway.module_namespace
gateway = module_gateway.gateway
store = module_gateway.store


# Tasks' pages on a free port of their own.
GATEWAY_OVERRIDES = {"proxy_port": 0}


@pytest.fixture(scope="module")
async def notebook(gateway: Gateway, store: EventStore) -> AsyncIterator[str]:
    server = await HttpServer.start(task_server(), listen("127.0.0.1", 0))
    yield await given_task(store, gateway, "NOTEBOOK", ready_at=f"127.0.0.1:{server.port}")
    await server.stop()


@pytest.fixture(scope="module")
def ports(gateway: Gateway) -> tuple[int, int]:
    """The web UI's port and tasks' pages' port."""
    assert gateway.http is not None
    ui, proxy = gateway.http.ports
    assert ui != proxy
    return ui, proxy


@pytest.fixture(scope="module")
async def alice(gateway: Gateway, ports: tuple[int, int]) -> str:
    """The session token of alice, the notebook's owner."""
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{ports[0]}", timeout=DEADLINE_S) as http:
        admin = await login(http, "admin", PASSWORD)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{gateway.port}") as channel:
            request = api_pb2.CreateUserRequest(
                username="alice", password=salted_hash(PASSWORD), is_hashed=True
            )
            await api_pb2_grpc.DeterminedStub(channel).CreateUser(
                request, metadata=tuple(bearer(admin).items())
            )
        return await login(http, "alice", PASSWORD)


async def test_a_browser_opening_a_task_on_the_web_uis_port_is_sent_to_the_tasks_port(
    ports: tuple[int, int], notebook: str, alice: str
) -> None:
    ui, proxy = ports
    cookie = {"cookie": f"det_session={alice}"}
    async with httpx.AsyncClient(timeout=DEADLINE_S) as http:
        sent = await http.post(f"http://localhost:{ui}/proxy/{notebook}/echo?a=1&b=%2F", headers=cookie)
        assert sent.status_code == 307  # a redirect that keeps the method and body
        assert sent.headers["location"] == f"http://localhost:{proxy}/proxy/{notebook}/echo?a=1&b=%2F"
        opened = await http.get(f"http://localhost:{proxy}/proxy/{notebook}/echo?a=1", headers=cookie)
        assert opened.status_code == 200 and opened.json() == {
            "path": f"/proxy/{notebook}/echo",
            "query": "a=1",
        }
        # The CLI and scripts send their token: served on either port.
        with_token = await http.get(f"http://127.0.0.1:{ui}/proxy/{notebook}/echo", headers=bearer(alice))
        assert with_token.status_code == 200


async def test_the_tasks_port_serves_tasks_pages_only(
    ports: tuple[int, int], notebook: str, alice: str
) -> None:
    ui, proxy = ports
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{proxy}", timeout=DEADLINE_S) as http:
        for path in ("/", "/api/v1/me", "/ui/app.js"):
            refused = await http.get(path, headers=bearer(alice))
            assert refused.status_code == 404, path
            assert refused.json()["message"] == (
                f"{path}: this address serves tasks' pages only (/proxy/<task id>/); the web UI and"
                f" the API are at http://127.0.0.1:{ui}"
            )
        # Without a login, a browser is led to the web UI's login, and back.
        page = await http.get(f"/proxy/{notebook}/echo", headers={"accept": "text/html"})
        assert page.status_code == 401
        assert f'href="http://127.0.0.1:{ui}/#/login?next=/proxy/{notebook}/echo"' in page.text


async def test_a_tasks_websocket_opens_on_its_port_and_a_browsers_is_refused_on_the_web_uis(
    ports: tuple[int, int], notebook: str, alice: str
) -> None:
    ui, proxy = ports
    cookie = [("cookie", f"det_session={alice}")]
    async with connect(f"ws://127.0.0.1:{proxy}/proxy/{notebook}/ws", additional_headers=cookie) as task:
        await task.send("42")
        assert await task.recv() == "42"
    with pytest.raises(InvalidStatus) as refused:
        async with connect(f"ws://127.0.0.1:{ui}/proxy/{notebook}/ws", additional_headers=cookie):
            pass
    answer = refused.value.response
    assert answer.status_code == 400
    assert json.loads(bytes(answer.body or b""))["message"] == (
        f"tasks' pages are served at http://127.0.0.1:{proxy}: open"
        f" http://127.0.0.1:{proxy}/proxy/{notebook}/ws"
    )


async def test_the_web_uis_page_is_never_framed(ports: tuple[int, int]) -> None:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{ports[0]}", timeout=DEADLINE_S) as http:
        page = await http.get("/")
    assert page.status_code == 200
    assert page.headers["content-security-policy"] == "frame-ancestors 'none'"
    assert page.headers["x-frame-options"] == "DENY"
