"""Watching a send: the campaigns page shows a campaign's sent count rise while a real worker
sends, without a reload, until it reaches the total and the campaign completes.

The SMTP server holds the replies to RCPT TO for half the audience (tests.support.smtp_server
RcptHold), so the page is caught half way on cue — no timing guesses — and then released.
"""

from __future__ import annotations

import json
import re
import subprocess

from playwright.sync_api import Page, expect

from tests.browser.pages import log_in, number
from tests.browser.world import World, worker_command
from tests.support.factories import launch_json, write_yaml
from tests.support.serve_process import herald_env
from tests.support.smtp_server import LedgerSMTPServer, RcptHold

CAMPAIGN = "welcome-series"
AUDIENCE = [f"member{i:02d}@example.com" for i in range(12)]
HELD = AUDIENCE[6:]
WELCOME_YAML = f"""\
name: {CAMPAIGN}
from: "Herald Club <club@herald.test>"
audience: [{", ".join(AUDIENCE)}]
steps:
  - id: welcome
    subject: "Welcome to the club"
    text: "Hello {{{{ email }}}}, welcome."
"""


def test_sent_rises_in_the_page_while_a_worker_sends_and_the_campaign_completes(
    page: Page, world: World
) -> None:
    launched = launch_json(world.db_url, write_yaml(world.folder / CAMPAIGN, WELCOME_YAML))
    assert launched["new_jobs"] == len(AUDIENCE)

    log_in(page, world, "/")
    row = page.locator(f'tr[data-campaign="{CAMPAIGN}"]')
    sent, total = row.locator("[data-test=sent]"), row.locator("[data-test=total]")
    expect(sent).to_have_text(re.compile(r"^\s*0\s*$"))
    expect(total).to_have_text(re.compile(rf"^\s*{len(AUDIENCE)}\s*$"))
    expect(row.locator("[data-test=progress]")).to_be_visible()
    loads: list[str] = []
    page.on("load", lambda loaded: loads.append(loaded.url))

    hold = RcptHold(lambda address: address in HELD)
    with LedgerSMTPServer(world.folder / "welcome-ledger.txt", rcpt_hold=hold) as smtp:
        worker = subprocess.Popen(
            worker_command(world.db_url, smtp),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=herald_env({}),
        )
        try:
            assert hold.wait_held(len(HELD), timeout=60), f"held only {hold.held}"
            # Half the audience accepted, half held at RCPT: the page, never reloaded, says so.
            expect(sent).to_have_text(re.compile(rf"^\s*{len(AUDIENCE) - len(HELD)}\s*$"))
            assert number(sent.inner_text()) < number(total.inner_text())
            hold.release()
            expect(sent).to_have_text(re.compile(rf"^\s*{len(AUDIENCE)}\s*$"))
            stdout, stderr = worker.communicate(timeout=120)
        finally:
            hold.release()
            if worker.poll() is None:
                worker.kill()
                worker.communicate()
    assert worker.returncode == 0, stderr
    assert json.loads(stdout)["sent"] >= len(AUDIENCE)
    expect(row.locator("[data-test=status]")).to_have_text(re.compile("completed", re.I))
    assert loads == [], f"the page reloaded: {loads}"
    assert len(smtp.accepted_ids()) >= len(AUDIENCE)
