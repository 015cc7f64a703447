"""Real headless Chromium (Debian's `chromium` and `chromium-driver`) driven by
selenium against a real local cluster's web UI. The tests here are skipped,
with the reason, where the browser, its driver or selenium is missing
(`.ci/run` installs them where apt-get works).

Fixtures: `cluster` (a local cluster for the browser tests, as the end-to-end
tests start theirs), `ui_url` (the web UI: the master port + 1), `browser` (one
headless Chromium for the session), `signed_in` (that browser with admin
logged in). `screenshot(browser, name)` keeps a picture
of the page in the git-ignored tests/browser/screenshots/; a failing test leaves
one too (`failed-<test>.png`)."""

import contextlib
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.e2e_cluster import Cluster, started_cluster
from support.webui_browser import (
    CHROMEDRIVER,
    CHROMIUM,
    css,
    found,
    log_in,
    missing_browser,
    screenshot,
    shown,
    until,
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    reason = missing_browser()
    if not reason:
        return
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.path).parents:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    with started_cluster("det-browser") as running:
        yield running


@pytest.fixture(scope="session")
def ui_url(cluster: Cluster) -> str:
    return f"http://127.0.0.1:{cluster.master_port + 1}"


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(found(CHROMIUM))
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(str(found(CHROMEDRIVER))))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def signed_in(browser: Any, ui_url: str, cluster: Cluster) -> Any:
    """The browser on the UI with admin logged in."""
    if not browser.current_url.startswith(ui_url) or not shown(browser, "#whoami"):
        log_in(browser, ui_url, cluster.password)
        until(
            browser,
            lambda d: shown(d, "#whoami") and "admin" in css(d, "#whoami").text,
            "#whoami to show admin",
        )
    return browser


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failing browser test leaves a picture of where the page was."""
    report = yield
    if call.when == "call" and call.excinfo is not None and "browser" in getattr(item, "funcargs", {}):
        from selenium.common.exceptions import WebDriverException

        with contextlib.suppress(WebDriverException):  # a dead browser leaves no picture
            screenshot(item.funcargs["browser"], f"failed-{item.name}")  # type: ignore[attr-defined]
    return report
