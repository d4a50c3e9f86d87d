"""A real headless Chromium (Debian's package, driven by Playwright) for the dashboard tests.

One browser per test session (starting Chromium is the slow part); every test gets a fresh
context, so no cookie or storage leaks from one test into the next. The browser is found via
HERALD_CHROMIUM, else ``chromium`` / ``chromium-browser`` on PATH. A missing browser fails the
run with the command that installs it: these tests are the issue's Show and are never skipped.

The dashboard ``world`` (one database per backend, with a campaign sent by a real worker
process and a real ``herald serve`` in front of it) is shared by every test here: starting it
is the other slow part. Tests that change it act on jobs and addresses of their own.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import (
    Browser,
    Page,
    Playwright,
    ViewportSize,
    expect,
    sync_playwright,
)

from tests.browser.world import World, build_world
from tests.support.paths import REPO_ROOT

VIEWPORT: ViewportSize = {"width": 1280, "height": 800}
# Auto-waiting assertions poll up to this long: generous, since CI shares two cores.
expect.set_options(timeout=30_000)


def chromium_path() -> str:
    configured = os.environ.get("HERALD_CHROMIUM")
    if configured:
        if not Path(configured).is_file():
            pytest.fail(f"HERALD_CHROMIUM={configured} is not a file")
        return configured
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    pytest.fail(
        "the dashboard tests need Chromium: `apt-get install chromium` "
        "(or set HERALD_CHROMIUM to a Chromium/Chrome binary)"
    )


# Package scope, not session: Playwright's sync API runs an event loop in this thread while it
# is open, so a test outside tests/browser that calls asyncio.run() on the same (xdist) worker
# would fail. Pytest closes it whenever the next test is not a browser test.
@pytest.fixture(scope="package")
def playwright() -> Iterator[Playwright]:
    with sync_playwright() as driver:
        yield driver


@pytest.fixture(scope="package")
def browser(playwright: Playwright) -> Iterator[Browser]:
    launched = playwright.chromium.launch(
        executable_path=chromium_path(), args=["--no-sandbox"], headless=True
    )
    yield launched
    launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A page in a fresh context; afterwards, no script error and no server error happened."""
    context = browser.new_context(viewport=VIEWPORT)
    context.set_default_timeout(30_000)
    opened = context.new_page()
    problems: list[str] = []
    opened.on("pageerror", lambda error: problems.append(f"script error: {error}"))
    opened.on(
        "response",
        lambda r: problems.append(f"{r.status} from {r.url}") if r.status >= 500 else None,
    )
    yield opened
    context.close()
    assert problems == []


@pytest.fixture(scope="session")
def screenshot_dir() -> Path:
    configured = os.environ.get("HERALD_SCREENSHOT_DIR")
    folder = Path(configured) if configured else REPO_ROOT / "build" / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="package", params=["sqlite", "postgresql"])
def world(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[World]:
    with build_world(request, tmp_path_factory) as built:
        yield built
