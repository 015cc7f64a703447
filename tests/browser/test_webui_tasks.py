"""The web UI's tasks in real headless Chromium against a real local cluster:
the Tasks page lists a task as the gateway's read model has it and its Kill
button kills it; a task's page follows its logs until it ends; the
experiment page's "Open TensorBoard" launches a TensorBoard over the
experiment's trials and opens it in a new tab once it answers through the
gateway's /proxy/<id>/. Tasks are launched as the CLI launches them (POST
/api/v1/tasks), and the cluster runs them. Each page leaves a screenshot in
tests/browser/screenshots/.

The element ids are the contract between the UI and these tests (see
services/gateway/http/ui/pages/tasks.js)."""

import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.e2e_cluster import Cluster, wait_for
from support.webui_browser import css, css_all, open_page, screenshot, shown, sign_in, until

from determined.common.passwords import salted_hash

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

# More slots than the cluster's agent has (2): the task waits PENDING until killed.
WAITING_CONFIG = """
description: webui-waiting
resources:
  slots: 64
"""
KNOWN_LINE = "webui-task-known-line"
# The cookie a login sets for the gateway's /proxy/ routes.
SESSION_COOKIE = "det_session"

# One trial that reports a few training points and ends.
TRAIN_PY = """
import determined as det

with det.core.init() as core_context:
    for step in range(1, 4):
        core_context.train.report_training_metrics(steps_completed=step, metrics={"loss": 1.0 / step})
"""
EXPERIMENT_YAML = """
name: webui-tensorboard
entrypoint: python3 train.py
searcher:
  name: single
  metric: loss
  max_length:
    batches: 3
max_restarts: 0
"""


@pytest.fixture(scope="module")
def http(cluster: Cluster, ui_url: str) -> Iterator[httpx.Client]:
    """The gateway's HTTP API as admin."""
    with httpx.Client(base_url=ui_url, timeout=30) as client:
        login = {"username": "admin", "password": salted_hash(cluster.password), "isHashed": True}
        answer = client.post("/api/v1/auth/login", json=login)
        assert answer.status_code == 200, answer.text
        client.headers["authorization"] = f"Bearer {answer.json()['token']}"
        yield client


@pytest.fixture(scope="module", autouse=True)
def logged_out_after(browser: Any, ui_url: str) -> Iterator[None]:
    """The session's browser is left as these tests found it: logged out (the
    next module's first test may start from the login page)."""
    yield
    open_page(browser, ui_url, "tasks")
    if shown(browser, "#nav-logout"):
        css(browser, "#nav-logout").click()
        until(browser, lambda d: shown(d, "#login-username"), "the login page after logging out")


def launch(http: httpx.Client, body: dict[str, Any]) -> str:
    answer = http.post("/api/v1/tasks", json=body)
    assert answer.status_code == 200, answer.text
    return str(answer.json()["task"]["id"])


def task(http: httpx.Client, task_id: str) -> dict[str, Any]:
    answer = http.get(f"/api/v1/tasks/{task_id}")
    assert answer.status_code == 200, answer.text
    return dict(answer.json()["task"])


def cell(driver: Any, task_id: str, name: str) -> str:
    return str(css(driver, f'tr[data-task-id="{task_id}"] td.{name}').text.strip())


def test_the_tasks_page_lists_a_task_and_its_kill_button_kills_it(
    signed_in: Any, ui_url: str, http: httpx.Client
) -> None:
    task_id = launch(http, {"taskType": "COMMAND", "configYaml": WAITING_CONFIG, "command": ["sleep", "600"]})
    browser = signed_in
    css(browser, "#nav-tasks").click()
    until(browser, lambda d: cell(d, task_id, "state") == "PENDING", f"task {task_id}'s row PENDING", 60)
    assert cell(browser, task_id, "kind") == "Command"
    assert cell(browser, task_id, "description") == "webui-waiting"
    assert cell(browser, task_id, "owner") == "admin"
    row = f'tr[data-task-id="{task_id}"]'
    assert not shown(browser, f"{row} a.open"), "a command has no server to open"
    until(browser, lambda d: css(d, "#live").get_attribute("data-state") == "open", "the page's live stream")
    screenshot(browser, "6-tasks")

    css(browser, f"{row} button.kill").click()
    until(
        browser,
        lambda d: cell(d, task_id, "state") == "TERMINATED",
        f"task {task_id}'s row TERMINATED, told by the stream (the fallback poll is every 30 s)",
        60,
    )
    assert not css(browser, f"{row} button.kill").is_enabled(), "an ended task cannot be killed again"
    ended = task(http, task_id)
    assert ended["state"] == "STATE_TERMINATED" and ended["exitReason"], ended
    assert ended["exitReason"] in cell(browser, task_id, "exit"), "the row says why it ended"


def test_a_task_page_follows_its_logs_until_it_ends(signed_in: Any, ui_url: str, http: httpx.Client) -> None:
    command = [f"echo {KNOWN_LINE}; sleep 2; echo done"]
    task_id = launch(http, {"taskType": "COMMAND", "command": command})
    browser = signed_in
    open_page(browser, ui_url, f"tasks/{task_id}")
    until(
        browser,
        lambda d: any(KNOWN_LINE in line.text for line in css_all(d, "#task-logs div.log-line")),
        "the command's known log line",
        120,
    )
    until(browser, lambda d: css(d, "#task-state").text.strip() == "TERMINATED", "the command to end", 120)
    until(browser, lambda d: css(d, "#task-logs").get_attribute("data-ended") == "true", "the logs to end")
    facts = css(browser, "dl.facts").text
    assert "Exit code\n0" in facts, facts
    assert not css(browser, "#task-kill").is_enabled()
    screenshot(browser, "7-task")


@pytest.fixture(scope="module")
def experiment(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> int:
    """A finished experiment of one trial."""
    context: Path = tmp_path_factory.mktemp("tensorboard")
    (context / "train.py").write_text(textwrap.dedent(TRAIN_PY))
    experiment_id = cluster.create(context, EXPERIMENT_YAML)
    wait_for(
        lambda: cluster.experiment_state(experiment_id) == "COMPLETED", "the experiment to complete", 120
    )
    return experiment_id


def test_open_tensorboard_launches_one_and_opens_it_once_it_answers(
    signed_in: Any, ui_url: str, cluster: Cluster, http: httpx.Client, experiment: int
) -> None:
    browser = signed_in
    home = browser.current_window_handle
    open_page(browser, ui_url, f"experiments/{experiment}")
    until(browser, lambda d: "COMPLETED" in css(d, "#experiment-state").text, "the experiment's page")
    tabs = set(browser.window_handles)
    css(browser, "#experiment-tensorboard").click()
    link = until(browser, lambda d: shown(d, '#tensorboard-status a[href^="#/tasks/"]'), "the launched task")
    task_id = str(link.get_attribute("href")).rsplit("/", 1)[-1]
    launched = task(http, task_id)
    assert launched["taskType"] == "TENSORBOARD" and launched["owner"] == "admin", launched
    assert [int(n) for n in launched["experimentIds"]] == [experiment], launched
    [tab] = until(browser, lambda d: set(d.window_handles) - tabs, "the TensorBoard's tab")
    try:
        until(browser, lambda d: shown(d, "#tensorboard-status a.open"), "the TensorBoard to answer", 120)
        browser.switch_to.window(tab)
        # On the port of tasks' pages: another origin than the web UI's.
        tasks_url = f"http://127.0.0.1:{cluster.master_port + 2}"
        until(
            browser,
            lambda d: d.current_url.startswith(f"{tasks_url}/proxy/{task_id}/"),
            "the tab at /proxy/<id>/ on the port of tasks' pages",
        )
        until(browser, lambda d: "TensorBoard" in d.title, "TensorBoard's page in the tab", 60)
        assert browser.execute_script("return window.sessionStorage.length") == 0, (
            "the login token stays in the UI's tab, out of the task's page"
        )
        assert browser.execute_script("return window.opener") is None, (
            "the task's page cannot reach the UI's tab"
        )
        until(browser, lambda d: "loss" in css(d, "body").text, "the trial's scalar tag `loss`", 60)
        screenshot(browser, "8-tensorboard")
        # Without the login cookie the proxy's page leads to the login and back here.
        browser.delete_cookie(SESSION_COOKIE)
        browser.refresh()
        css(browser, f'a[href^="{ui_url}/#/login?next=/proxy/"]').click()
        sign_in(browser, cluster.password)
        until(browser, lambda d: "TensorBoard" in d.title, "TensorBoard's page again after logging in", 60)
        assert browser.execute_script("return window.sessionStorage.length") == 0, (
            "a login on the way to a task's page leaves no token in its tab"
        )
    finally:
        browser.switch_to.window(tab)
        browser.close()
        browser.switch_to.window(home)
    # The Tasks page offers to open it again, and kills it.
    open_page(browser, ui_url, "tasks")
    row = f'tr[data-task-id="{task_id}"]'
    opener = until(browser, lambda d: shown(d, f"{row} a.open"), "the running TensorBoard's Open link")
    assert opener.get_attribute("href") == f"{ui_url}/proxy/{task_id}/"
    assert cell(browser, task_id, "kind") == "TensorBoard"
    css(browser, f"{row} button.kill").click()
    until(
        browser, lambda d: cell(d, task_id, "state") == "TERMINATED", "the killed TensorBoard TERMINATED", 60
    )
    assert not shown(browser, f"{row} a.open"), "an ended TensorBoard cannot be opened"
