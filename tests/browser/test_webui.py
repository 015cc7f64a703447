"""The web UI in real headless Chromium against a real local cluster: log in
(a wrong password is refused on the page), an experiment created with the CLI
shows up and changes state on the experiments page, its page draws the
learning curves of all its trials with every reported point, the trial's page
tails its logs, the kill button cancels a running experiment, and the cluster
page lists the agent. The pages hear of changes through their server-sent
events (the header's #live shows the stream open), so a change shows within
seconds, long before their fallback poll (30 s). Each page leaves a screenshot in tests/browser/screenshots/.

The element ids are the contract between the UI and these tests (see
services/gateway/http/ui/)."""

import textwrap
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.e2e_cluster import Cluster, wait_for
from support.webui_browser import css, css_all, fill, log_in, open_page, screenshot, shown, until

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

# Each trial of the watched experiment reports this many training points of `loss` and
# validation points of `validation_loss`, prints KNOWN_LINE, then waits for the gate file.
TRAINING_POINTS = 12
VALIDATION_EVERY = 4
KNOWN_LINE = "webui-known-line from the trial"
TRIALS = 2

WATCHED_TRAIN_PY = """
import os
import time

import determined as det

width = det.get_cluster_info().trial.hparams["width"]
with det.core.init() as core_context:
    for step in range(1, {points} + 1):
        core_context.train.report_training_metrics(steps_completed=step, metrics={{"loss": width / step}})
        if step % {every} == 0:
            core_context.train.report_validation_metrics(
                steps_completed=step, metrics={{"validation_loss": 2.0 * width / step}}
            )
        core_context.train.report_progress(step / {points})
    with core_context.checkpoint.store_path({{"steps_completed": {points}}}) as (path, storage_id):
        (path / "weights.txt").write_text("w")
    print("{known}", flush=True)
    end = time.monotonic() + 120
    while not os.path.exists({gate!r}) and time.monotonic() < end:
        time.sleep(0.2)
"""

WATCHED_YAML = f"""
name: webui-watched
entrypoint: python3 train.py
hyperparameters:
  width:
    type: categorical
    vals: [1, 2]
  learning_rate: 0.1
searcher:
  name: grid
  metric: validation_loss
  smaller_is_better: true
  max_length:
    batches: {TRAINING_POINTS}
max_restarts: 0
"""

# Runs until paused or killed (it stops when asked to), a log line each half second.
KILLED_TRAIN_PY = """
import time

import determined as det

with det.core.init() as core_context:
    for step in range(1, 600):
        core_context.train.report_training_metrics(steps_completed=step, metrics={"loss": 1.0 / step})
        print("tick", step, flush=True)
        if core_context.preempt.should_preempt():
            break
        time.sleep(0.5)
"""

KILLED_YAML = """
name: webui-killed
entrypoint: python3 train.py
searcher:
  name: single
  metric: loss
  max_length:
    batches: 600
max_restarts: 0
"""


# -- helpers ---------------------------------------------------------------------------


def row_state(driver: Any, experiment_id: int) -> str:
    return str(css(driver, f'tr[data-experiment-id="{experiment_id}"] td.state').text.strip())


def points_drawn(driver: Any, selector: str) -> int | None:
    value = css(driver, selector).get_attribute("data-points")
    return int(value) if value not in (None, "") else None


def data_rows(driver: Any, selector: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    return list(css(driver, selector).find_elements(By.XPATH, ".//tr[td]"))


def choose_metric(driver: Any, wanted: Callable[[str], bool]) -> str:
    """Picks the first option of #metric-select whose value or text `wanted` accepts."""
    from selenium.webdriver.support.ui import Select

    select = Select(css(driver, "#metric-select"))
    until(driver, lambda d: Select(css(d, "#metric-select")).options, "the metric choices")
    for option in select.options:
        for label in (option.get_attribute("value") or "", option.text):
            if wanted(label.strip()):
                select.select_by_value(option.get_attribute("value") or "")
                return label
    raise AssertionError(f"no metric to choose among {[o.text for o in select.options]}")


def is_training_loss(label: str) -> bool:
    return "loss" in label and "validation" not in label


def is_validation_loss(label: str) -> bool:
    return "validation_loss" in label


# -- fixtures --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gate(cluster: Cluster) -> Path:
    """Touched when the test has seen the watched experiment ACTIVE: its trials then end.
    In a folder the trials can see when they run as another OS user (not under tmp_path)."""
    return cluster.storage_folder("gate") / f"open-{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="module")
def watched(cluster: Cluster, gate: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """An experiment of TRIALS trials, created with the CLI, that runs until the gate opens."""
    context = tmp_path_factory.mktemp("watched")
    code = WATCHED_TRAIN_PY.format(
        points=TRAINING_POINTS, every=VALIDATION_EVERY, known=KNOWN_LINE, gate=str(gate)
    )
    (context / "train.py").write_text(textwrap.dedent(code))
    experiment_id = cluster.create(context, WATCHED_YAML)
    yield experiment_id
    gate.touch()


def finished(cluster: Cluster, experiment_id: int, gate: Path) -> None:
    gate.touch()
    wait_for(
        lambda: cluster.experiment_state(experiment_id) == "COMPLETED", "the experiment to complete", 120
    )


# -- tests -----------------------------------------------------------------------------


def test_a_wrong_password_is_refused_and_the_right_one_logs_in(
    browser: Any, ui_url: str, cluster: Cluster
) -> None:
    browser.get(f"{ui_url}/")
    until(browser, lambda d: shown(d, "#login-username"), "the login page at / before logging in")
    log_in(browser, ui_url, cluster.password + "-wrong")
    error = until(browser, lambda d: shown(d, "#login-error"), "#login-error after a wrong password")
    assert error.text.strip(), "the login error says something"
    screenshot(browser, "1-login")
    assert not shown(browser, "#whoami")

    log_in(browser, ui_url, cluster.password)
    whoami = until(browser, lambda d: shown(d, "#whoami"), "#whoami after logging in")
    until(browser, lambda d: "admin" in whoami.text, "#whoami to name admin")
    assert browser.execute_script("return window.sessionStorage.length") > 0, (
        "the token is kept in sessionStorage"
    )


def test_logging_out_and_a_bad_token_show_the_login_page(
    signed_in: Any, ui_url: str, cluster: Cluster
) -> None:
    browser = signed_in
    css(browser, "#nav-logout").click()
    until(browser, lambda d: shown(d, "#login-username"), "the login page after logging out")

    log_in(browser, ui_url, cluster.password)
    until(browser, lambda d: shown(d, "#whoami"), "#whoami after logging in again")
    # A token the server refuses (401) brings the login page back.
    browser.execute_script(
        "for (const key of Object.keys(sessionStorage)) {"
        "  if (/token/i.test(key)) sessionStorage.setItem(key, 'not-a-token');"
        "}"
    )
    browser.get(f"{ui_url}/#/experiments")
    browser.refresh()
    until(browser, lambda d: shown(d, "#login-username"), "the login page after a 401")


def test_the_experiments_page_follows_an_experiment_from_active_to_completed(
    signed_in: Any, ui_url: str, cluster: Cluster, watched: int, gate: Path
) -> None:
    browser = signed_in
    open_page(browser, ui_url, "experiments")
    until(browser, lambda d: shown(d, "#experiments-table"), "#experiments-table")
    until(
        browser, lambda d: row_state(d, watched) == "ACTIVE", f"experiment {watched}'s row to show ACTIVE", 60
    )
    row = css(browser, f'tr[data-experiment-id="{watched}"]')
    assert css_all(row, ".progress"), "the row has a progress bar"
    assert css_all(row, "button.kill") and css_all(row, "button.pause"), "the row has kill and pause buttons"
    assert "webui-watched" in row.text
    until(browser, lambda d: css(d, "#live").get_attribute("data-state") == "open", "the page's live stream")
    screenshot(browser, "2-experiments")

    gate.touch()  # the trials end: the same page, never reloaded, shows COMPLETED
    wait_for(lambda: cluster.experiment_state(watched) == "COMPLETED", "the experiment to complete", 90)
    until(
        browser,
        lambda d: row_state(d, watched) == "COMPLETED",
        f"experiment {watched}'s row to show COMPLETED, told by its stream (the fallback poll is every 30 s)",
        10,
    )
    # The best validation_loss: the narrower trial's last, 2 * 1 / TRAINING_POINTS.
    best = css(browser, f'tr[data-experiment-id="{watched}"] td.best').text.strip()
    assert float(best) == pytest.approx(2 / TRAINING_POINTS, rel=1e-3), best


def test_the_experiment_page_draws_the_learning_curves_of_all_trials(
    signed_in: Any, ui_url: str, cluster: Cluster, watched: int, gate: Path
) -> None:
    finished(cluster, watched, gate)
    browser = signed_in
    open_page(browser, ui_url, f"experiments/{watched}")
    until(browser, lambda d: shown(d, "#experiment-state"), "#experiment-state")
    until(
        browser, lambda d: "COMPLETED" in css(d, "#experiment-state").text, "the experiment's state COMPLETED"
    )
    until(
        browser,
        lambda d: len(css_all(d, "#trials-table tr[data-trial-id]")) == TRIALS,
        f"{TRIALS} trial rows",
    )
    # Each trial's best validation_loss: its last, 2 * width / TRAINING_POINTS.
    titles = [th.text.strip() for th in css_all(browser, "#trials-table thead th")]
    column = titles.index("Best validation_loss") + 1
    bests = [float(td.text) for td in css_all(browser, f"#trials-table tbody td:nth-child({column})")]
    assert sorted(bests) == pytest.approx([2 / TRAINING_POINTS, 4 / TRAINING_POINTS], rel=1e-3), bests

    choose_metric(browser, is_validation_loss)
    validations = TRIALS * (TRAINING_POINTS // VALIDATION_EVERY)
    until(
        browser,
        lambda d: points_drawn(d, "#learning-curves") == validations,
        f"#learning-curves to draw {validations} points of validation_loss",
    )
    choose_metric(browser, is_training_loss)
    until(
        browser,
        lambda d: points_drawn(d, "#learning-curves") == TRIALS * TRAINING_POINTS,
        f"#learning-curves to draw {TRIALS * TRAINING_POINTS} points of loss",
    )
    for part in ("#hp-parallel", "#hp-scatter"):
        assert shown(browser, part), f"{part} is on the page"
    until(browser, lambda d: len(data_rows(d, "#checkpoints-table")) >= TRIALS, "a checkpoint row per trial")
    assert "grid" in css(browser, "#config-yaml").text, "the config is shown as YAML"
    screenshot(browser, "3-experiment")


def test_the_trial_page_shows_its_logs_and_chart(
    signed_in: Any, ui_url: str, cluster: Cluster, watched: int, gate: Path
) -> None:
    finished(cluster, watched, gate)
    trial_id = cluster.trials(watched)[0]["id"]
    browser = signed_in
    open_page(browser, ui_url, f"trials/{trial_id}")
    until(browser, lambda d: "COMPLETED" in css(d, "#trial-state").text, "the trial's state COMPLETED")
    until(
        browser,
        lambda d: any(KNOWN_LINE in line.text for line in css_all(d, "#trial-logs div.log-line")),
        "the trial's known log line",
    )
    until(browser, lambda d: (points_drawn(d, "#trial-chart") or 0) > 0, "#trial-chart to draw its points")
    drawn = points_drawn(browser, "#trial-chart")
    assert drawn in (TRAINING_POINTS, TRAINING_POINTS // VALIDATION_EVERY), drawn
    css(browser, "#log-scale").click()
    until(browser, lambda d: points_drawn(d, "#trial-chart") == drawn, "the chart redrawn on a log scale")
    until(browser, lambda d: data_rows(d, "#trial-checkpoints"), "the trial's checkpoint")

    fill(browser, "#log-search", "webui-known")
    until(
        browser,
        lambda d: (
            [line.text for line in css_all(d, "#trial-logs div.log-line") if line.is_displayed()]
            and all(
                "webui-known" in line.text
                for line in css_all(d, "#trial-logs div.log-line")
                if line.is_displayed()
            )
        ),
        "the log search to keep only the matching lines",
    )
    css(browser, "#log-search").clear()
    screenshot(browser, "4-trial")


def test_a_running_trial_tails_its_logs_and_the_row_buttons_pause_activate_and_kill(
    signed_in: Any, ui_url: str, cluster: Cluster, tmp_path: Path
) -> None:
    (tmp_path / "train.py").write_text(textwrap.dedent(KILLED_TRAIN_PY))
    experiment_id = cluster.create(tmp_path, KILLED_YAML)
    [trial] = wait_for(lambda: cluster.trials(experiment_id), "the experiment's trial", 60)
    browser = signed_in

    # The trial page follows the running trial's logs: new lines come without a reload.
    open_page(browser, ui_url, f"trials/{trial['id']}")
    first = until(browser, lambda d: ticks(d), "the running trial's first log lines", 60)
    until(browser, lambda d: ticks(d) > first + 2, "more log lines, live")

    # The cluster page while it runs: its job in the queue (the picture shows the busy slot).
    css(browser, "#nav-cluster").click()
    until(browser, lambda d: data_rows(d, "#jobs-table"), "the running experiment's job in #jobs-table")
    screenshot(browser, "5-cluster-busy")

    open_page(browser, ui_url, "experiments")
    until(
        browser, lambda d: row_state(d, experiment_id) == "ACTIVE", f"experiment {experiment_id} ACTIVE", 60
    )
    row = f'tr[data-experiment-id="{experiment_id}"]'
    css(browser, f"{row} button.pause").click()
    until(
        browser, lambda d: row_state(d, experiment_id) == "PAUSED", f"experiment {experiment_id} PAUSED", 60
    )
    css(browser, f"{row} button.activate").click()
    until(
        browser,
        lambda d: row_state(d, experiment_id) == "ACTIVE",
        f"experiment {experiment_id} ACTIVE again",
        60,
    )

    css(browser, f"{row} button.kill").click()
    accept_confirmation(browser)
    until(
        browser,
        lambda d: row_state(d, experiment_id) == "CANCELED",
        f"experiment {experiment_id} CANCELED",
        90,
    )
    assert cluster.experiment_state(experiment_id) == "CANCELED"


def ticks(driver: Any) -> int:
    """How many of the running trial's "tick" lines the trial page shows."""
    return sum(1 for line in css_all(driver, "#trial-logs div.log-line") if "tick" in line.text)


def accept_confirmation(driver: Any) -> None:
    """Accepts the browser's confirm() when the page asks one."""
    from selenium.common.exceptions import NoAlertPresentException, TimeoutException
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        WebDriverWait(driver, 1).until(expected_conditions.alert_is_present())
        driver.switch_to.alert.accept()
    except (NoAlertPresentException, TimeoutException):
        pass


def test_the_experiments_page_filters_by_name_and_state(
    signed_in: Any, ui_url: str, cluster: Cluster, watched: int, gate: Path
) -> None:
    from selenium.webdriver.support.ui import Select

    finished(cluster, watched, gate)
    browser = signed_in
    open_page(browser, ui_url, "experiments")
    row = f'tr[data-experiment-id="{watched}"]'
    until(browser, lambda d: css_all(d, row), f"experiment {watched}'s row")

    fill(browser, "#filter-name", "no-such-experiment")
    until(browser, lambda d: not css_all(d, row), "the name filter to hide the row")
    fill(browser, "#filter-name", "webui-watch")
    until(browser, lambda d: css_all(d, row), "the name filter to show the row again")
    css(browser, "#filter-name").clear()

    states = Select(css(browser, "#filter-state"))
    canceled = next(o for o in states.options if (o.get_attribute("value") or "").endswith("CANCELED"))
    states.select_by_value(canceled.get_attribute("value") or "")
    until(browser, lambda d: not css_all(d, row), "the state filter to hide the COMPLETED experiment")
    assert all(state.text.strip() == "CANCELED" for state in css_all(browser, "#experiments-table td.state"))
    states.select_by_value("")
    until(browser, lambda d: css_all(d, row), "all states again")

    cluster.det("e", "archive", str(watched))
    until(browser, lambda d: not css_all(d, row), "the archived experiment to leave the page")
    css(browser, "#filter-archived").click()
    until(browser, lambda d: css_all(d, row), "Show archived to show it")
    cluster.det("e", "unarchive", str(watched))
    css(browser, "#filter-archived").click()
    until(browser, lambda d: css_all(d, row), "the unarchived experiment without Show archived")

    for descending in (False, True):  # one click sorts ascending, the next descending
        css(browser, BEST_HEADER).click()
        until(
            browser,
            lambda d, down=descending: sorted_by_best(d, down),
            f"the rows by best metric ({'descending' if descending else 'ascending'}), those without one last",
        )


BEST_HEADER = '#experiments-table th[data-sort="SORT_BY_BEST_TRIAL_SEARCHER_METRIC"]'


def sorted_by_best(driver: Any, descending: bool) -> bool:
    """The experiments page shows the server's answer sorted by best metric
    (the header says so once it has drawn it): by value, those without last."""
    classes = (css(driver, BEST_HEADER).get_attribute("class") or "").split()
    if "sorted" not in classes or ("descending" in classes) != descending:
        return False
    texts = [td.text.strip() for td in css_all(driver, "#experiments-table td.best")]
    valued = sorted((t for t in texts if t), key=float, reverse=descending)
    return bool(valued) and texts == valued + [t for t in texts if not t]


def test_the_cluster_page_lists_the_agent_and_its_slots(
    signed_in: Any, ui_url: str, cluster: Cluster
) -> None:
    [agent] = cluster.json("agent", "list")
    browser = signed_in
    css(browser, "#nav-cluster").click()
    until(browser, lambda d: agent["agent_id"] in css(d, "#agents-table").text, "the agent in #agents-table")
    until(browser, lambda d: len(data_rows(d, "#slots-table")) >= 2, "the agent's 2 slots in #slots-table")
    assert shown(browser, "#jobs-table")
    screenshot(browser, "5-cluster")
