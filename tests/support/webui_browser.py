"""Finding Debian's Chromium and its driver, and keeping screenshots of pages
(in the git-ignored tests/browser/screenshots/)."""

import shutil
from pathlib import Path
from typing import Any

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
