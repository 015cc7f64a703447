"""What the chaos suite checks after a part of the cluster was killed: the supervisor's
record of the part, the points a trial shows, the read models against a fresh rebuild of
the log, and processes left behind."""

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import asyncpg

from support.e2e_cluster import Cluster, wait_for

# Every read-model table but the projector's own bookkeeping, with the columns that order it.
TABLES = {
    "experiments": "id",
    "trials": "id",
    "allocations": "allocation_id",
    "metrics": 'trial_id, "group", steps_completed, trial_run_id',
    "checkpoints": "uuid",
    "agents": "agent_id",
}


def part_status(data_dir: Path, name: str) -> dict[str, Any]:
    status = json.loads((data_dir / "run" / "status.json").read_text())
    [part] = [part for part in status["parts"] if part["name"] == name]
    return dict(part)


def wait_until_restarted(data_dir: Path, name: str, before: dict[str, Any]) -> dict[str, Any]:
    """The part's status once it runs again as a new process (and, for a service, is ready)."""

    def restarted() -> dict[str, Any] | None:
        part = part_status(data_dir, name)
        ready = name in ("nats-server", "postgres") or (data_dir / "run" / f"{name}.ready").exists()
        fresh = part["state"] == "running" and part["pid"] not in (0, before["pid"])
        return part if fresh and ready else None

    return wait_for(restarted, f"the supervisor to restart {name}", 90)


def training_steps(cluster: Cluster, trial_id: int) -> list[int]:
    """The trial's training points as users see them (superseded ones are not shown)."""
    rows = cluster.query(
        "SELECT steps_completed FROM read_model.metrics WHERE trial_id = $1 AND \"group\" = 'training' "
        "AND NOT superseded ORDER BY steps_completed",
        trial_id,
    )
    return [row["steps_completed"] for row in rows]


def read_models_match_rebuild(cluster: Cluster) -> bool:
    """Rebuilds the read models from the log into a new database and compares every table
    with the cluster's own, once the cluster's projector has caught up with the same log."""
    check_db = f"check_{uuid.uuid4().hex[:8]}"
    asyncio.run(_execute(cluster.superuser_url("postgres"), f'CREATE DATABASE "{check_db}"'))
    try:
        _rebuild_into(cluster, cluster.superuser_url(check_db))
        rebuilt = asyncio.run(_tables(cluster.superuser_url(check_db)))
        wait_for(
            lambda: asyncio.run(_tables(cluster.superuser_url("determined"))) == rebuilt,
            "the cluster's read models to equal a fresh rebuild",
            30,
        )
    finally:
        asyncio.run(_execute(cluster.superuser_url("postgres"), f'DROP DATABASE "{check_db}"'))
    return True


def _rebuild_into(cluster: Cluster, database_url: str) -> None:
    environment = dict(
        os.environ,
        DET_DATABASE_URL=database_url,
        DET_NATS_URL=f"nats://127.0.0.1:{cluster.nats_port}",
        DET_NAMESPACE="det",
        DET_NATS_USER="gateway",
        DET_NATS_PASSWORD=cluster.nats_login("gateway").password.get_secret_value(),
    )
    subprocess.run(
        [sys.executable, "-m", "services.gateway.rebuild"],
        env=environment,
        check=True,
        capture_output=True,
        timeout=300,
    )


async def _execute(url: str, statement: str) -> None:
    connection = await asyncpg.connect(url)
    try:
        await connection.execute(statement)
    finally:
        await connection.close()


async def _tables(url: str) -> dict[str, list[tuple[Any, ...]]]:
    connection = await asyncpg.connect(url)
    try:
        return {
            table: [
                tuple(row)
                for row in await connection.fetch(f"SELECT * FROM read_model.{table} ORDER BY {order}")
            ]
            for table, order in TABLES.items()
        }
    finally:
        await connection.close()


def cluster_processes(data_dir: Path, pids: set[int] | None = None) -> list[str]:
    """Live processes that belong to the cluster: the given pids, or any process whose
    command line, working folder or environment names the data folder."""
    marker = str(data_dir)
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            cwd = os.readlink(entry / "cwd")
            environ = (entry / "environ").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if state == "Z":
            continue
        if int(entry.name) in (pids or set()) or marker in cmdline or marker in cwd or marker in environ:
            found.append(f"{entry.name}: {cmdline.strip()}")
    return found
