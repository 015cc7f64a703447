"""Finding Debian's Chromium and its driver, keeping screenshots of pages
(in the git-ignored tests/browser/screenshots/), and the few moves the
browser tests make on a page (find, wait for, fill, log in)."""

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

SCREENSHOTS = Path(__file__).parents[1] / "browser" / "screenshots"
CHROMIUM = ("chromium", "chromium-browser", "google-chrome")
CHROMEDRIVER = ("chromedriver",)


def found(names: tuple[str, ...]) -> str | None:
    return next((path for path in map(shutil.which, names) if path), None)


def missing_browser() -> str:
    """Why the browser tests cannot run here ("" when they can)."""
    missing = []
    if found(CHROMIUM) is None:
        missing.append("chromium")
    if found(CHROMEDRIVER) is None:
        missing.append("chromedriver")
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("selenium (pip install -e '.[test]')")
    if not missing:
        return ""
    return f"no {', '.join(missing)}: install with `apt-get install chromium chromium-driver` to run the browser tests"


# The tallest picture of a page kept (pixels): a long page is cut there.
TALLEST_PAGE = 4000


def screenshot(driver: Any, name: str) -> Path:
    """The whole page (from its top, up to TALLEST_PAGE high) as screenshots/<name>.png."""
    SCREENSHOTS.mkdir(exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    size = driver.get_window_size()
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.execute_script("window.scrollTo(0, 0)")
    driver.set_window_size(size["width"], min(max(int(height) + 150, size["height"]), TALLEST_PAGE))
    try:
        driver.save_screenshot(str(path))
    finally:
        driver.set_window_size(size["width"], size["height"])
    return path


def until(driver: Any, condition: Callable[[Any], T], what: str, timeout_s: float = 30.0) -> T:
    """Waits for `condition(driver)` to be truthy, ignoring elements not there yet."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(
        driver,
        timeout_s,
        poll_frequency=0.2,
        ignored_exceptions=(NoSuchElementException, StaleElementReferenceException),
    )
    try:
        return wait.until(condition)
    except Exception as error:  # TimeoutException: say what was awaited
        raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}") from error


def css(driver: Any, selector: str) -> Any:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, selector)


def css_all(driver: Any, selector: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    return list(driver.find_elements(By.CSS_SELECTOR, selector))


def shown(driver: Any, selector: str) -> Any:
    """The element when it is displayed, else None (for `until`)."""
    found = [element for element in css_all(driver, selector) if element.is_displayed()]
    return found[0] if found else None


def open_page(driver: Any, ui_url: str, route: str) -> None:
    driver.get(f"{ui_url}/#/{route}")


def log_in(driver: Any, ui_url: str, password: str, username: str = "admin") -> None:
    open_page(driver, ui_url, "login")
    sign_in(driver, password, username)


def sign_in(driver: Any, password: str, username: str = "admin") -> None:
    """Fills and sends the login form the page shows."""
    until(driver, lambda d: shown(d, "#login-username"), "the login form")
    fill(driver, "#login-username", username)
    fill(driver, "#login-password", password)
    css(driver, "#login-submit").click()


def fill(driver: Any, selector: str, text: str) -> None:
    field = css(driver, selector)
    field.clear()
    field.send_keys(text)
