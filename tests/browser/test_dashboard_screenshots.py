"""Screenshots of the dashboard's main pages, for the README, written by every test run.

Into ``$HERALD_SCREENSHOT_DIR/<backend>/`` (default build/screenshots/, git-ignored) at a fixed
1280x800 viewport; docs/screenshots/ holds a copy of the SQLite set. Each page is checked to
show what it is for before it is photographed, so a broken page fails here rather than ending
up in the README.
"""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import Page, expect

from tests.browser.pages import log_in
from tests.browser.world import DELIVERED, NEWSLETTER, World

READER = DELIVERED[0]
SUPPRESSED = [
    ("bounced@example.org", "hard bounce: mailbox unknown"),
    ("complaint@example.net", "marked as spam"),
]


def shoot(page: Page, folder: Path, name: str) -> None:
    page.evaluate("() => document.fonts.ready")  # no half-loaded text in the picture
    path = folder / f"{name}.png"
    page.screenshot(path=str(path), animations="disabled")
    assert path.stat().st_size > 10_000, f"{path} looks empty"


def test_screenshots_of_the_main_pages(page: Page, world: World, screenshot_dir: Path) -> None:
    folder = screenshot_dir / world.backend
    folder.mkdir(parents=True, exist_ok=True)

    page.goto(world.url("/login"))
    expect(page.locator("form[data-test=login]")).to_be_visible()
    shoot(page, folder, "login")

    log_in(page, world, "/suppressions")
    for address, reason in SUPPRESSED:
        form = page.locator("[data-test=suppress-form]")
        form.locator("[name=address]").fill(address)
        form.locator("[name=reason]").fill(reason)
        form.locator("[data-test=suppress-submit]").click()
        expect(page.locator(f'tr[data-address="{address}"]')).to_be_visible()
    page.goto(world.url("/suppressions"))
    shoot(page, folder, "suppressions")

    page.goto(world.url("/"))
    expect(page.locator(f'tr[data-campaign="{NEWSLETTER}"] [data-test=sent]')).to_be_visible()
    shoot(page, folder, "campaigns")

    page.goto(world.url(f"/campaigns/{NEWSLETTER}"))
    expect(page.locator('tr[data-step="announce"]')).to_be_visible()
    expect(page.locator('tr[data-step="reminder"]')).to_be_visible()
    expect(page.locator("svg[data-test=sends-chart]")).to_be_visible()
    shoot(page, folder, "campaign")

    page.goto(world.url("/in-doubt"))
    evidence = page.locator(f'tr[data-job="{world.in_doubt[-1]}"] [data-test=evidence]')
    expect(evidence).to_be_visible()
    shoot(page, folder, "in-doubt")

    page.goto(world.url(f"/preview?campaign={NEWSLETTER}&step=announce&recipient={READER}"))
    expect(page.locator("[data-test=preview]")).to_contain_text("Spring is here")
    shoot(page, folder, "preview")

    page.goto(world.url("/dead"))
    expect(page.locator(f'tr[data-job="{world.dead[-1]}"] [data-test=retry]')).to_be_visible()
    shoot(page, folder, "dead")
