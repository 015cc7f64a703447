"""The web UI's History tab and "Why did it stop?" in real headless Chromium,
over a recorded log: the golden adaptive_pause_kill log (an ASHA search whose
trial 3 is cut at rung 0) stored as recorded in a module-wide gateway's
namespace, so no cluster runs and nothing trains. The experiment's History tab
lists its events with who appended them and why, clicking one highlights the
event it answers, and trial 3's "Why did it stop?" gives its chain and the
outcome. The gateway serves from this test's event loop, so the browser is
driven from a thread.

The element ids are the contract between the UI and these tests (see
services/gateway/http/ui/pages/history.js)."""

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from support import module_gateway
from support.golden_log import golden_log, stored_as_recorded
from support.security_gateway import PASSWORD
from support.webui_browser import css, css_all, log_in, open_page, screenshot, shown, until

from services.common.eventstore import EventStore
from services.gateway.server import Gateway

pytestmark = [pytest.mark.browser]

module_namespace = module_gateway.module_namespace
gateway = module_gateway.gateway
store = module_gateway.store

LOG = "adaptive_pause_kill.jsonl"
# Experiment 1 of the log: the ASHA search; its trial 3 is cut at the first rung.
EXPERIMENT = 1
CUT_TRIAL = 3
CUT = "cut at rung 0 (4 batches)"


@pytest.fixture(scope="module")
async def ui_url(gateway: Gateway, store: EventStore) -> str:
    """The gateway's web UI once it has projected the whole recorded log."""
    log = golden_log(LOG)
    await stored_as_recorded(store, log)
    assert await gateway.projector.wait_for(len(log), timeout_s=60)
    return f"http://127.0.0.1:{gateway.http.port}"


@pytest.fixture
def page(browser: Any, ui_url: str) -> Iterator[Any]:
    """The session's browser, which leaves this gateway's pages afterwards (before the gateway
    stops: a page's open stream would hold up its shutdown), so the next module logs in to its own."""
    yield browser
    browser.get("about:blank")


def history_rows(driver: Any) -> list[dict[str, str]]:
    """The History tab's shown rows as {sequence, type, actor, actor_kind, summary, reason}."""
    rows = []
    for row in css_all(driver, "#history-table tr.event"):
        if not row.is_displayed():
            continue
        actor = row.find_element("css selector", "td.actor .actor")
        rows.append(
            {
                "sequence": row.get_attribute("data-sequence"),
                "type": row.get_attribute("data-type"),
                "actor": actor.text.strip(),
                "actor_kind": actor.get_attribute("data-kind"),
                "summary": row.find_element("css selector", "td.summary").text.strip(),
                "reason": row.find_element("css selector", "td.reason").text.strip(),
            }
        )
    return rows


def check_history_and_why(driver: Any, ui_url: str) -> None:
    from selenium.webdriver.support.ui import Select

    log_in(driver, ui_url, PASSWORD)
    until(driver, lambda d: shown(d, "#whoami"), "the login to land")
    open_page(driver, ui_url, f"experiments/{EXPERIMENT}/history")
    until(driver, lambda d: len(history_rows(d)) > 10, "the History tab's events")
    rows = history_rows(driver)
    created = next(r for r in rows if r["type"] == "experiment_created")
    assert (created["actor_kind"], created["actor"]) == ("user", "determined"), created
    assert created["summary"], created
    stop = next(r for r in rows if r["type"] == "trial_stop_requested" and CUT in r["reason"])
    assert (stop["actor_kind"], stop["actor"]) == ("service", "searcher"), stop
    sequences = [int(r["sequence"]) for r in rows]
    assert sequences == sorted(sequences), "newest last"
    assert all(r["type"] != "agent_registered" for r in rows), "only the experiment's events"

    # The cut answers a validation: clicking it highlights that event and lists what it led to.
    css(driver, f'#history-table tr.event[data-sequence="{stop["sequence"]}"]').click()
    cause = until(driver, lambda d: shown(d, "#history-table tr.cause"), "the event the stop answers")
    assert cause.get_attribute("data-type") == "trial_validation_reported"
    led_to = css(driver, "#history-table tr.event-detail dd.led-to").text
    assert "allocation stop requested" in led_to, led_to
    screenshot(driver, "9-history")

    # Filtered by type: only those rows.
    Select(css(driver, "#history-type")).select_by_value("trial_stop_requested")
    until(driver, lambda d: {r["type"] for r in history_rows(d)} == {"trial_stop_requested"}, "the filter")

    # The trial's row on the Overview tab asks too.
    css(driver, "#tab-overview").click()
    css(driver, f'#trials-table tr[data-trial-id="{CUT_TRIAL}"] button.why').click()
    outcome = until(driver, lambda d: shown(d, "#trial-explain p.outcome"), "the outcome under the trials")
    assert CUT in outcome.text, outcome.text
    screenshot(driver, "9-history-why")

    open_page(driver, ui_url, f"trials/{CUT_TRIAL}")
    until(driver, lambda d: shown(d, "#trial-why"), "the trial's page").click()
    outcome = until(driver, lambda d: shown(d, "#trial-explain p.outcome"), "the outcome")
    assert CUT in outcome.text, outcome.text
    chain = [item.get_attribute("data-type") for item in css_all(driver, "#trial-explain li.explained")]
    assert "trial_created" in chain and "trial_stop_requested" in chain, chain
    depths = [
        int(item.get_attribute("data-depth")) for item in css_all(driver, "#trial-explain li.explained")
    ]
    assert depths[0] == 0 and max(depths) > 0, depths
    screenshot(driver, "10-why-did-it-stop")


async def test_the_history_tab_and_why_did_it_stop(page: Any, ui_url: str) -> None:
    await asyncio.wait_for(asyncio.to_thread(check_history_and_why, page, ui_url), timeout=120)
