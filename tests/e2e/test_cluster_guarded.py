"""A cluster's nats-server and PostgreSQL let in its own parts only, and a data folder
made before credentials existed (PostgreSQL trusting every local connection, no
credentials.json, a cluster.secret with the password the agents shared) gets them at its
next cluster-up (each agent its own nats-server user) and runs as before."""

import asyncio
import json
import stat

import asyncpg
import pytest
from support.e2e_cluster import Cluster, started_cluster, wait_for

from deploy.local.cluster import ClusterRecord
from deploy.local.credentials import CREDENTIALS_FILE

pytestmark = pytest.mark.e2e

TRUST_RULES = "host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust\n"


def age(cluster: Cluster) -> None:
    """Makes the stopped cluster's folder look like one of an earlier version."""
    (cluster.data_dir / "postgres" / "pg_hba.conf").write_text(TRUST_RULES)
    (cluster.data_dir / CREDENTIALS_FILE).unlink()
    secret_file = cluster.data_dir / "cluster.secret"
    identity = json.loads(secret_file.read_text())
    secret_file.write_text(
        json.dumps(
            {
                "cluster_id": identity["cluster_id"],
                "secret": identity["secret"],
                "nats_user": "agent",
                "nats_password": "shared",
            }
        )
    )  # all agents' of old


def passwordless_connection_refused(cluster: Cluster) -> bool:
    async def attempt() -> bool:
        try:
            connection = await asyncpg.connect(
                f"postgresql://postgres@127.0.0.1:{cluster.postgres_port}/postgres"
            )
        except (asyncpg.InvalidPasswordError, asyncpg.InvalidAuthorizationSpecificationError):
            return True
        await connection.close()
        return False

    return asyncio.run(attempt())


def all_running(cluster: Cluster) -> bool:
    status = json.loads(
        cluster.det("deploy", "local", "status", "--json", "--data-dir", str(cluster.data_dir)).stdout
    )
    return {part["state"] for part in status["parts"]} == {"running"}


def test_a_folder_made_before_credentials_restarts_guarded() -> None:
    with started_cluster("det-e2e-creds") as cluster:
        assert passwordless_connection_refused(cluster)
        assert cluster.query("SELECT current_user AS name")[0]["name"] == "postgres"
        assert cluster.down().returncode == 0
        age(cluster)
        again = cluster.up()
        assert again.returncode == 0, again.stdout + again.stderr
        assert stat.S_IMODE((cluster.data_dir / CREDENTIALS_FILE).stat().st_mode) == 0o600
        users = json.loads((cluster.data_dir / CREDENTIALS_FILE).read_text())["nats"]
        record = ClusterRecord.load(cluster.data_dir)
        assert record is not None
        assert "agent" not in users and [name for name in users if name.startswith("agent:")] == [
            f"agent:{agent.agent_id}" for agent in record.agent_specs()
        ]
        assert "nats_password" not in json.loads((cluster.data_dir / "cluster.secret").read_text())
        assert passwordless_connection_refused(cluster)
        wait_for(lambda: all_running(cluster), "every part running again")
        assert cluster.json("experiment", "list") is not None  # the gateway reads its read models
        assert not leaked_passwords(cluster)


def leaked_passwords(cluster: Cluster) -> list[str]:
    """The log files that hold any of the cluster's passwords."""
    found = json.loads((cluster.data_dir / CREDENTIALS_FILE).read_text())
    passwords = [user["password"] for user in found["nats"].values()] + list(found["postgres"].values())
    logs = [path for path in (cluster.data_dir / "logs").iterdir() if path.is_file()]
    return [
        str(path)
        for path in logs
        if any(password in path.read_text(errors="replace") for password in passwords)
    ]
