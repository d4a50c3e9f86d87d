"""Steps the dashboard tests share: logging in, and reading what a page shows."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect

from tests.browser.world import PASSWORD, World


def log_in(page: Page, world: World, path: str = "/") -> None:
    """Through the login form, as a person would; ends on ``path``."""
    page.goto(world.url(f"/login?next={path}"))
    form = page.locator("form[data-test=login]")
    form.locator("input[name=secret]").fill(PASSWORD)
    form.locator("[data-test=login-submit]").click()
    expect(page).to_have_url(re.compile(re.escape(world.url(path)) + r"(\?.*)?$"))


def has_session_cookie(page: Page) -> bool:
    return any(cookie["name"] == "herald_session" for cookie in page.context.cookies())


def number(text: str) -> int:
    """The integer a cell shows ("1,234" or "1 234" included)."""
    digits = re.sub(r"[^0-9]", "", text)
    assert digits, f"no number in {text!r}"
    return int(digits)
