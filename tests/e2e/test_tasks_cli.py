"""Commands and notebooks through the real CLI against a real cluster (the session's
`cluster`: cluster-up's gateway, scheduler and process agent): `det cmd run` prints the
command's output and exits with its code, a command that does not exist ends with the
shell's error, `det task list` shows them, a command's priority is its job's, a notebook
answers through the gateway's proxy once `det notebook start` says so, and kill ends tasks."""

import json
import uuid
from typing import Any

import httpx
import pytest
from support.e2e_cluster import Cluster, wait_for

pytestmark = pytest.mark.e2e

# A task's start includes the agent's and (for a notebook) JupyterLab's; bounds against hangs.
DEADLINE_S = 120.0


def task(cluster: Cluster, noun: str, task_id: str) -> dict[str, Any]:
    return dict(cluster.json(noun, "describe", task_id))


def ended(cluster: Cluster, noun: str, task_id: str) -> dict[str, Any]:
    return wait_for(
        lambda: (found := task(cluster, noun, task_id))["state"] == "TERMINATED" and found,
        f"{noun} {task_id} to end",
        DEADLINE_S,
    )


def launched_id(output: str) -> str:
    """The id in "Launched command (id: <id>, name: ...)."."""
    line = next(line for line in output.splitlines() if line.startswith("Launched "))
    return line.split("(id: ", 1)[1].split(",", 1)[0]


def test_cmd_run_prints_the_output_and_exits_with_the_commands_code(cluster: Cluster) -> None:
    marker = uuid.uuid4().hex
    run = cluster.det("cmd", "run", f"echo {marker}; exit 3", check=False)
    assert run.returncode == 3, run.stdout + run.stderr
    assert f"|| {marker}\n" in run.stdout
    command_id = launched_id(run.stdout)

    missing = cluster.det("cmd", "run", f"no-such-command-{marker}", check=False)
    assert missing.returncode == 127, missing.stdout + missing.stderr
    assert f"no-such-command-{marker}: not found" in missing.stdout
    missing_id = launched_id(missing.stdout)

    listed = {t["id"]: t for t in cluster.json("task", "list")}
    assert listed[command_id]["state"] == "TERMINATED" and listed[command_id]["exit_code"] == 3
    assert listed[missing_id]["task_type"] == "COMMAND" and listed[missing_id]["allocation_id"]
    table = cluster.det("task", "list").stdout
    assert command_id in table and missing_id in table
    assert f"|| {marker}" in cluster.det("task", "logs", command_id[:8]).stdout
    assert cluster.det("cmd", "list", "-q").stdout.split().count(command_id) == 1


def test_a_command_is_a_job_and_a_killed_one_ends_saying_who_killed_it(cluster: Cluster) -> None:
    command_id = cluster.det("cmd", "run", "-d", "echo started; sleep 600").stdout.strip()
    wait_for(lambda: "|| started" in cluster.det("cmd", "logs", command_id).stdout, "the command's output")
    changed = cluster.det("cmd", "set", "priority", command_id[:8], "10").stdout
    assert changed == f"Updated job task/{command_id}: priority 10\n"
    assert cluster.det("cmd", "kill", command_id).stdout == f"Killed command {command_id}\n"
    stopped = ended(cluster, "cmd", command_id)
    assert "killed by admin" in stopped["exit_reason"]
    again = cluster.det("cmd", "kill", command_id).stdout
    assert command_id in again and "Killed command" not in again  # already ended: nothing to kill


def test_a_notebook_answers_through_the_proxy_once_start_says_so(cluster: Cluster) -> None:
    started = cluster.det("notebook", "start", "--no-browser", "--config", "description=e2e notebook")
    url = started.stdout.splitlines()[-1].rpartition(" ")[2]
    notebook_id = launched_id(started.stdout)
    assert url.endswith(f":{cluster.master_port + 1}/proxy/{notebook_id}/")
    token = login_token(cluster)
    answer = httpx.get(url, headers={"Authorization": f"Bearer {token}"}, follow_redirects=True, timeout=30)
    assert answer.status_code == 200 and "JupyterLab" in answer.text
    # A browser is sent to the port of tasks' pages (an origin apart from the web UI's), and
    # without a login is refused there.
    browser = httpx.get(url, timeout=30)
    assert browser.status_code == 307
    assert browser.headers["location"] == url.replace(
        f":{cluster.master_port + 1}/", f":{cluster.master_port + 2}/"
    )
    assert httpx.get(url, follow_redirects=True, timeout=30).status_code == 401
    assert "description: e2e notebook" in cluster.det("notebook", "config", notebook_id).stdout

    cluster.det("notebook", "kill", notebook_id[:8])
    assert ended(cluster, "notebook", notebook_id)["exit_reason"]
    gone = cluster.det("notebook", "open", notebook_id, check=False)
    assert gone.returncode == 1 and f"notebook {notebook_id} has ended" in gone.stderr


def login_token(cluster: Cluster) -> str:
    answer = httpx.post(
        f"http://localhost:{cluster.master_port + 1}/api/v1/auth/login",
        content=json.dumps({"username": "admin", "password": cluster.password}),
        timeout=30,
    )
    answer.raise_for_status()
    return str(answer.json()["token"])
