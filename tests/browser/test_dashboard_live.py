"""Watching a send: the campaigns page shows a campaign's sent count rise while a real worker
sends, without a reload, until it reaches the total and the campaign completes.

The SMTP server holds every reply to RCPT TO (tests.support.smtp_server RcptHold) and lets
them go in two stages, so the page is seen at 0, then half way, then done, each on cue — no
timing guesses. The worker process starts while the browser logs in.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from playwright.sync_api import Page, expect

from tests.browser.pages import log_in
from tests.browser.world import World, finish_worker, start_worker
from tests.support.factories import launch_json, write_yaml
from tests.support.smtp_server import LedgerSMTPServer, RcptHold

CAMPAIGN = "welcome-series"
AUDIENCE = [f"member{i:02d}@example.com" for i in range(12)]
FIRST, SECOND = AUDIENCE[:6], AUDIENCE[6:]
WELCOME_YAML = f"""\
name: {CAMPAIGN}
from: "Herald Club <club@herald.test>"
audience: [{", ".join(AUDIENCE)}]
steps:
  - id: welcome
    subject: "Welcome to the club"
    text: "Hello {{{{ email }}}}, welcome."
"""


class TwoStages(RcptHold):
    """Holds the audience's RCPTs: ``first`` until ``first.release()``, the rest until
    ``second.release()``. Other campaigns' recipients pass."""

    def __init__(self, first: Callable[[str], bool], second: Callable[[str], bool]) -> None:
        super().__init__(lambda address: first(address) or second(address))
        self.first, self.second = RcptHold(first), RcptHold(second)

    async def wait(self, address: str) -> None:
        await self.first.wait(address)
        await self.second.wait(address)

    def release(self) -> None:
        self.first.release()
        self.second.release()


def exactly(count: int) -> re.Pattern[str]:
    return re.compile(rf"^\s*{count}\s*$")


def test_sent_rises_in_the_page_while_a_worker_sends_and_the_campaign_completes(
    world: World, page: Page
) -> None:
    launched = launch_json(world.db_url, write_yaml(world.folder / CAMPAIGN, WELCOME_YAML))
    assert launched["new_jobs"] == len(AUDIENCE)
    hold = TwoStages(lambda a: a in FIRST, lambda a: a in SECOND)
    with LedgerSMTPServer(world.folder / "welcome-ledger.txt", rcpt_hold=hold) as smtp:
        worker = start_worker(world.db_url, smtp)
        try:
            log_in(page, world, "/")
            row = page.locator(f'tr[data-campaign="{CAMPAIGN}"]')
            sent = row.locator("[data-test=sent]")
            expect(row.locator("[data-test=total]")).to_have_text(exactly(len(AUDIENCE)))
            expect(row.locator("[data-test=progress]")).to_be_visible()
            expect(sent).to_have_text(exactly(0))
            loads: list[str] = []
            page.on("load", lambda loaded: loads.append(loaded.url))

            assert hold.first.wait_held(len(FIRST), timeout=60), f"held {hold.first.held}"
            hold.first.release()
            # The first half accepted, the second held at RCPT: the page, not reloaded, says so.
            expect(sent).to_have_text(exactly(len(FIRST)))
            assert hold.second.wait_held(len(SECOND), timeout=60), f"held {hold.second.held}"
            hold.second.release()
            expect(sent).to_have_text(exactly(len(AUDIENCE)))
            expect(row.locator("[data-test=status]")).to_have_text(re.compile("completed", re.I))
            assert loads == [], f"the page reloaded: {loads}"
        finally:
            hold.release()
            report = finish_worker(worker)
    assert report["sent"] >= len(AUDIENCE)  # and any job another test re-queued
    assert len(set(smtp.accepted_ids())) >= len(AUDIENCE)
