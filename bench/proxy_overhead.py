"""What the gateway's /proxy/<task id>/ adds: a 1 MiB GET and a WebSocket
echo round trip (a 32-byte message), each through the gateway and straight
to the task's server, interleaved so that drift hits both alike.

Starts its own nats-server, PostgreSQL and a gateway in-process (HTTP API on
a free port, a real cluster's settings: logins needed); the task's server is
a small Starlette app under uvicorn in a process of its own, and the client
runs in another (so the gateway's process does the proxy's work alone, as it
would for a browser elsewhere). The task is a notebook row of the read model,
made by appending its AllocationRequested and AllocationReady. Prints
figures; asserts nothing.

    python bench/proxy_overhead.py [--gets 100] [--echoes 2000]
"""

import argparse
import asyncio
import contextlib
import json
import statistics
import subprocess
import sys
import time
import uuid
from typing import Any

import httpx
from _servers import gateway_settings, run_with_servers

from deploy.local.servers import free_port, wait_for_port
from determined.common.passwords import salted_hash
from determined.proto import events_pb2
from services.common.envelope import Append
from services.common.eventstore import EventStore
from services.gateway.server import Gateway

PASSWORD = "bench-password"
MiB = 1024 * 1024
ECHO = b"x" * 32


def task_server(port: int) -> None:
    """The task's server (its own process): 1 MiB at <prefix>mib, a WebSocket echo at <prefix>echo."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route, WebSocketRoute
    from starlette.websockets import WebSocket, WebSocketDisconnect

    body = b"x" * MiB

    async def mib(request: Request) -> Response:
        return Response(body, media_type="application/octet-stream")

    async def echo(websocket: WebSocket) -> None:
        await websocket.accept()
        try:
            while True:
                await websocket.send_bytes(await websocket.receive_bytes())
        except WebSocketDisconnect:
            pass

    app = Starlette(routes=[Route("/proxy/{task}/mib", mib), WebSocketRoute("/proxy/{task}/echo", echo)])
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def client(direct: str, proxied: str, token: str, gets: int, echoes: int) -> dict[str, Any]:
    """The timings (its own process): seconds per GET and per echo, each way, interleaved in 10 rounds."""
    from websockets.sync.client import connect

    headers = {"authorization": f"Bearer {token}"}
    samples: dict[str, list[float]] = {
        "get direct": [],
        "get proxied": [],
        "echo direct": [],
        "echo proxied": [],
    }
    with httpx.Client(headers=headers, timeout=60) as http, contextlib.ExitStack() as opened:
        sockets = {
            way: opened.enter_context(
                connect(f"ws://{base.removeprefix('http://')}echo", additional_headers=headers)
            )
            for way, base in (("direct", direct), ("proxied", proxied))
        }
        for way, base in (("direct", direct), ("proxied", proxied)):  # warm up: connections, code paths
            for _ in range(5):
                assert len(http.get(base + "mib").content) == MiB
                sockets[way].send(ECHO)
                sockets[way].recv()
        for _ in range(10):
            for way, base in (("direct", direct), ("proxied", proxied)):
                for _ in range(gets // 10):
                    started = time.perf_counter()
                    answer = http.get(base + "mib")
                    assert answer.status_code == 200 and len(answer.content) == MiB
                    samples[f"get {way}"].append(time.perf_counter() - started)
                for _ in range(echoes // 10):
                    started = time.perf_counter()
                    sockets[way].send(ECHO)
                    assert sockets[way].recv() == ECHO
                    samples[f"echo {way}"].append(time.perf_counter() - started)
    return samples


async def notebook(gateway: Gateway, address: str) -> str:
    """A ready notebook at `address`, owned by admin; its id."""
    task_id = str(uuid.uuid4())
    allocation_id = f"{task_id}.1"
    store = await EventStore.connect(gateway.settings.nats_url, gateway.settings.namespace)
    try:
        requested = events_pb2.AllocationRequested(
            allocation_id=allocation_id,
            task_id=task_id,
            task_type="NOTEBOOK",
            job_id=f"task/{task_id}",
            owner="admin",
            task=events_pb2.TaskLaunch(config_json="{}"),
        )
        ready = events_pb2.AllocationReady(
            allocation_id=allocation_id, task_id=task_id, proxy_address=address
        )
        for payload, step in ((requested, "requested"), (ready, "ready")):
            await store.append(
                Append(f"allocation/{allocation_id}", payload, f"{allocation_id}-{step}"), actor="bench"
            )
    finally:
        await store.close()
    assert await gateway.projector.catch_up()
    return task_id


def summary(name: str, samples: list[float], size: int = 0) -> str:
    ordered = sorted(samples)
    median = statistics.median(ordered)
    p90 = ordered[int(len(ordered) * 0.9)]
    rate = f", {size / MiB / median:,.0f} MiB/s" if size else ""
    return f"{name}: median {median * 1e3:,.3f} ms, p90 {p90 * 1e3:,.3f} ms{rate} ({len(ordered)} samples)"


async def bench(args: argparse.Namespace, nats_url: str, postgres_url: str) -> None:
    settings = await gateway_settings(
        nats_url, postgres_url, initial_user_password=PASSWORD, http_port=free_port()
    )
    gateway = await Gateway.start(settings)
    port = free_port()
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(port)])
    try:
        assert gateway.http is not None
        assert await asyncio.to_thread(wait_for_port, port, 30.0, server), "the task's server did not start"
        task_id = await notebook(gateway, f"127.0.0.1:{port}")
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{gateway.http.port}") as http:
            login = {"username": "admin", "password": salted_hash(PASSWORD), "isHashed": True}
            token = (await http.post("/api/v1/auth/login", json=login)).json()["token"]
        direct = f"http://127.0.0.1:{port}/proxy/{task_id}/"
        proxied = f"http://127.0.0.1:{gateway.http.port}/proxy/{task_id}/"
        measured = await asyncio.create_subprocess_exec(
            sys.executable,
            __file__,
            "--client",
            json.dumps([direct, proxied, token, args.gets, args.echoes]),
            stdout=asyncio.subprocess.PIPE,
        )
        output, _ = await measured.communicate()
        assert measured.returncode == 0, "the client failed"
        samples = json.loads(output)
    finally:
        server.terminate()
        server.wait(10)
        await gateway.stop()
    print(summary("1 MiB GET, straight to the task", samples["get direct"], MiB))
    print(summary("1 MiB GET, through the gateway", samples["get proxied"], MiB))
    added = statistics.median(samples["get proxied"]) - statistics.median(samples["get direct"])
    print(f"  the proxy adds {added * 1e3:,.3f} ms per 1 MiB GET (difference of the medians)")
    print(summary("WebSocket echo (32 B), straight to the task", samples["echo direct"]))
    print(summary("WebSocket echo (32 B), through the gateway", samples["echo proxied"]))
    added = statistics.median(samples["echo proxied"]) - statistics.median(samples["echo direct"])
    print(f"  the proxy adds {added * 1e6:,.0f} µs per round trip (difference of the medians)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gets", type=int, default=100)
    parser.add_argument("--echoes", type=int, default=2000)
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--client", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        task_server(args.serve)
    elif args.client:
        print(json.dumps(client(*json.loads(args.client))))
    else:
        run_with_servers(bench, args)


if __name__ == "__main__":
    main()
