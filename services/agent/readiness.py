"""When a task's server answers: the agent polls it from its start, and says
so (AllocationReady) at the first answer. A TCP connection for a shell's
sshd; for a notebook or TensorBoard, an HTTP answer below 500 to GET of its
proxy prefix (a server that accepts connections may not serve pages yet).

It polls until the server answers or the runner cancels it (the process
exited): a server may take long to start (a big image's first import), and a
notebook that never answers is the user's to kill."""

import asyncio
import contextlib

import httpx

from services.agent.task_launch import proxy_address

POLL_S = 0.25
ATTEMPT_TIMEOUT_S = 5.0


async def wait_until_ready(host: str, port: int, prefix: str, *, http: bool) -> None:
    """Returns once the server at host:port answers (see the module's docstring)."""
    while not await answers(host, port, prefix, http=http):
        await asyncio.sleep(POLL_S)


async def answers(host: str, port: int, prefix: str, *, http: bool) -> bool:
    if http:
        url = f"http://{proxy_address(host, port)}{prefix}"
        try:
            async with httpx.AsyncClient(timeout=ATTEMPT_TIMEOUT_S, trust_env=False) as client:
                response = await client.get(url)
        except httpx.HTTPError:
            return False
        return response.status_code < 500
    try:
        async with asyncio.timeout(ATTEMPT_TIMEOUT_S):
            _, writer = await asyncio.open_connection(host, port)
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True
