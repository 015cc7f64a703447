"""A part whose NATS login is refused when it reconnects (its agent credentials revoked
while it runs) ends with exit status 1 and the reason alone on stderr: no traceback of
nats-py's reconnecting task before or after it."""

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.local.credentials import agent_user, authorization_config, credentials, without_agent
from deploy.local.servers import NatsServer, free_port

REPOSITORY = Path(__file__).resolve().parents[2]
AGENT = "a1"

# A part's connection, logged in as the agent's user; says when it is in, then waits.
PART = textwrap.dedent(
    """
    import asyncio, sys
    from pydantic import SecretStr
    from services.common.connection import Connection
    from services.common.settings import NatsCredentials

    async def main() -> None:
        url, user, password = sys.argv[1:]
        await Connection.open(url, "agent", NatsCredentials(user=user, password=SecretStr(password)))
        print("connected", flush=True)
        await asyncio.sleep(60)

    asyncio.run(main())
    """
)


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsServer]:
    found = credentials(tmp_path, [AGENT])
    server = NatsServer(
        tmp_path / "nats", free_port(), tmp_path / "nats.log", authorization=authorization_config(found.nats)
    )
    process = server.start()
    yield server
    process.terminate()
    process.wait(10)


def test_a_login_refused_on_reconnecting_ends_the_part_with_the_reason_and_no_traceback(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    user = agent_user(AGENT)
    password = credentials(tmp_path).nats[user].password
    part = subprocess.Popen(
        [sys.executable, "-c", PART, nats_server.url, user, password],
        cwd=REPOSITORY,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert part.stdout is not None
        assert part.stdout.readline().strip() == "connected"
        revoked = without_agent(tmp_path, AGENT)
        assert revoked is not None
        nats_server.authorization = authorization_config(credentials(tmp_path).nats)
        assert nats_server.reload(revoked.name, revoked.password, let_in=False)
        _, stderr = part.communicate(timeout=30)
    finally:
        part.kill()
    assert part.returncode == 1, stderr
    assert f"refused the login of user '{user}'" in stderr
    assert "Traceback" not in stderr, stderr
    assert "exception was never retrieved" not in stderr, stderr
