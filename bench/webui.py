"""The web UI's experiments page with 1,000 experiments, in headless Chromium
(Debian's `chromium` and `chromium-driver`, driven by selenium): time to first
render (the first page of rows drawn) and to interactive (the main thread free
again after them), counted from the navigation's start, for the default page
(50 rows) and for all 1,000 rows at once (the page-size menu set to 1000,
counted from that choice). Starts its own nats-server and PostgreSQL and the
gateway in-process; the experiments are created through CreateExperiment, as
`det experiment create` does (not activated: no agent runs them); and the page's API call alone, for
comparison. Prints
figures; asserts nothing.

    python bench/webui.py [--experiments 1000] [--loads 5]
"""

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import grpc
import httpx
from _servers import gateway_settings, run_with_servers

from determined.common.passwords import salted_hash
from determined.proto import api_pb2, api_pb2_grpc
from services.gateway.server import Gateway

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
from support.webui_browser import CHROMEDRIVER, CHROMIUM, found, missing_browser

PASSWORD = "Bench-Password1"
CONFIG = """
name: bench-{n:04d}
entrypoint: python3 train.py
searcher: {{name: single, metric: validation_loss, max_length: 100}}
hyperparameters: {{lr: 0.1}}
"""
# In the page: the navigation's start to the experiments page's marks (ms).
PAGE_MARKS = """
const marks = Object.fromEntries(performance.getEntriesByType("mark").map((m) => [m.name, m.startTime]));
const navigation = performance.getEntriesByType("navigation")[0];
return {rendered: marks["experiments:rendered"], interactive: marks["experiments:interactive"],
        domContentLoaded: navigation ? navigation.domContentLoadedEventEnd : null,
        rows: document.querySelectorAll("#experiments-table tr[data-experiment-id]").length};
"""
# In the page: choose 1000 rows a page, then time the rows drawn and the main thread free again.
ALL_ROWS = """
const done = arguments[arguments.length - 1];
const wanted = arguments[0];
const select = document.getElementById("page-size");
const started = performance.now();
select.value = "1000";
select.dispatchEvent(new Event("change"));
const check = () => {
  const rows = document.querySelectorAll("#experiments-table tr[data-experiment-id]").length;
  if (rows < wanted) { setTimeout(check, 5); return; }
  const rendered = performance.now() - started;
  requestAnimationFrame(() => setTimeout(() => done({rendered, interactive: performance.now() - started, rows})));
};
check();
"""


async def create_experiments(gateway: Gateway, count: int) -> str:
    """`count` experiments, created and projected; the admin's token."""
    assert gateway.http is not None
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{gateway.http.port}", timeout=60) as http:
        login = await http.post(
            "/api/v1/auth/login",
            json={"username": "admin", "password": salted_hash(PASSWORD), "isHashed": True},
        )
        token = str(login.json()["token"])
    started = time.perf_counter()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{gateway.port}") as channel:
        api = api_pb2_grpc.DeterminedStub(channel)
        metadata = (("authorization", f"Bearer {token}"),)
        for n in range(count):  # one at a time: experiment ids are taken in order
            request = api_pb2.CreateExperimentRequest(config_yaml=CONFIG.format(n=n), activate=False)
            await api.CreateExperiment(request, metadata=metadata)
    await gateway.projector.catch_up(timeout_s=600.0)
    print(f"{count:,} experiments created and projected in {time.perf_counter() - started:.1f} s")
    return token


def measure(url: str, token: str, loads: int, count: int) -> dict[str, list[float]]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = str(found(CHROMIUM))
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(str(found(CHROMEDRIVER))))
    driver.set_script_timeout(60)
    figures: dict[str, list[float]] = {}

    def keep(name: str, value: float) -> None:
        figures.setdefault(name, []).append(float(value))

    try:
        driver.get(url + "/#/login")
        driver.execute_script(
            "sessionStorage.setItem('det-token', arguments[0]); sessionStorage.setItem('det-user', 'admin');",
            token,
        )
        for load in range(loads + 1):  # the first load warms the browser's cache and is not counted
            driver.get("about:blank")
            driver.get(url + "/#/experiments")
            WebDriverWait(driver, 60).until(
                lambda d: d.execute_script(
                    "return document.querySelector('#experiments-table[data-loaded]') !== null"
                )
            )
            marks: dict[str, Any] = driver.execute_script(PAGE_MARKS)
            everything: dict[str, Any] = driver.execute_async_script(ALL_ROWS, count)
            if load == 0:
                print(f"default page: {marks['rows']} rows; all at once: {everything['rows']} rows")
                continue
            keep("domContentLoaded", marks["domContentLoaded"])
            keep("rendered", marks["rendered"])
            keep("interactive", marks["interactive"])
            keep("all_rendered", everything["rendered"])
            keep("all_interactive", everything["interactive"])
    finally:
        driver.quit()
    return figures


async def api_times(url: str, token: str, loads: int) -> dict[int, float]:
    """The page's own API call alone (the default page and all rows): median ms, JSON parsed."""
    times: dict[int, float] = {}
    async with httpx.AsyncClient(
        base_url=url, timeout=60, headers={"authorization": f"Bearer {token}"}
    ) as http:
        for limit in (50, 1000):
            seconds = []
            for _ in range(loads):
                started = time.perf_counter()
                (
                    await http.get(
                        f"/api/v1/experiments?sortBy=SORT_BY_ID&orderBy=ORDER_BY_DESC&limit={limit}"
                    )
                ).json()
                seconds.append(time.perf_counter() - started)
            times[limit] = statistics.median(seconds) * 1000
    return times


async def bench(args: argparse.Namespace, nats_url: str, postgres_url: str) -> None:
    settings = await gateway_settings(nats_url, postgres_url, http_port=0, initial_user_password=PASSWORD)
    gateway = await Gateway.start(settings)
    try:
        token = await create_experiments(gateway, args.experiments)
        assert gateway.http is not None
        url = f"http://127.0.0.1:{gateway.http.port}"
        api_ms = await api_times(url, token, args.loads)
        figures = await asyncio.to_thread(measure, url, token, args.loads, args.experiments)
    finally:
        await gateway.stop()

    def shown(name: str) -> str:
        values = sorted(figures[name])
        return f"median {statistics.median(values):.0f} ms (min {values[0]:.0f}, max {values[-1]:.0f})"

    print(
        f"experiments page, {args.experiments:,} experiments, {args.loads} loads (from the navigation's start):"
    )
    print(f"  DOMContentLoaded:                {shown('domContentLoaded')}")
    print(f"  first render (50 rows):          {shown('rendered')}")
    print(f"  interactive:                     {shown('interactive')}")
    print("all rows at once (page size 1000, from choosing it):")
    print(f"  rendered:                        {shown('all_rendered')}")
    print(f"  interactive:                     {shown('all_interactive')}")
    print(f"the API call alone: {api_ms[50]:.0f} ms for 50 rows, {api_ms[1000]:.0f} ms for 1000 (median)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", type=int, default=1000)
    parser.add_argument("--loads", type=int, default=5)
    args = parser.parse_args()
    reason = missing_browser()
    if reason:
        sys.exit(reason)
    run_with_servers(bench, args)


if __name__ == "__main__":
    main()
