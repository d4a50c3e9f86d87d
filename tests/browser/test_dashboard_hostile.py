"""Hostile data is shown as text: markup and script in a campaign's name, a step, a subject, a
recipient's name and a suppression reason appear literally on the pages, no script runs (no
dialog opens, no flag is set on the window) and no element is injected.

Campaign files cannot carry markup in names or step ids (campaigns.spec checks them), so those
are written into the database directly, as an older version or a hand edit could leave them:
the pages must escape whatever the database holds. The subject and the recipient's name come
through an ordinary launch.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, urlencode

import pytest
import sqlalchemy as sa
from playwright.sync_api import Dialog, Page, expect

from campaigns.models import campaign_table
from dispatch.models import send_job, send_key
from herald.db import create_engine
from tests.browser.pages import log_in
from tests.browser.world import SETTINGS, World
from tests.support.factories import launch_json, write_yaml
from tests.support.serve_process import herald_serve

# No "/" in the name: the page's URL holds it as one path segment (a spec-valid name never
# has one). An unclosed <script> would swallow the rest of the page if it were not escaped.
NAME = "<script data-pwned>window.__pwned='name';alert(0)"
STEP = '<img src=x data-pwned onerror="window.__pwned=1">'
SUBJECT = "Sale <script data-pwned>window.__pwned='s';alert(1)</script> & <b data-pwned>50%</b>"
PERSON = "<img src=x data-pwned onerror=alert(2)>"
REASON = "<svg data-pwned onload=\"window.__pwned='reason'\"></svg> said so"
CAMPAIGN_YAML = f"""\
name: plain
from: "Shop <shop@herald.test>"
audience: [{{email: eve@example.com, name: {json.dumps(PERSON)}}}]
steps:
  - id: greet
    subject: {json.dumps(SUBJECT)}
    text: "Hello {{{{ name }}}}"
"""


@pytest.fixture
def hostile_world(tmp_path: Path, db_url: str) -> Iterator[World]:
    launched = launch_json(db_url, write_yaml(tmp_path, CAMPAIGN_YAML))
    assert launched["new_jobs"] == 1, launched
    engine = create_engine(db_url)
    with engine.begin() as conn:
        conn.execute(sa.update(campaign_table).values(name=NAME))
        conn.execute(sa.update(send_job).values(campaign=NAME, step=STEP))
        conn.execute(sa.update(send_key).values(campaign=NAME, step=STEP))  # the job's identity
    try:
        with herald_serve(db_url, SETTINGS) as served:
            yield World(engine.dialect.name, db_url, engine, served, tmp_path, [], [])
    finally:
        engine.dispose()


def no_script_ran(page: Page, dialogs: list[str]) -> None:
    assert page.evaluate("() => window.__pwned") is None
    assert dialogs == []
    assert page.locator("[data-pwned]").count() == 0


def test_markup_and_script_in_names_subjects_and_reasons_are_shown_as_text(
    hostile_world: World, page: Page
) -> None:
    # hostile_world first: the browser context closes before herald serve stops, so the
    # server's graceful stop does not wait for the browser's keep-alive connection.
    dialogs: list[str] = []

    def dismiss(dialog: Dialog) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", dismiss)
    world = hostile_world
    log_in(page, world, "/")
    row = page.locator("table[data-test=campaigns] tr[data-campaign]")
    expect(row).to_have_count(1)
    expect(row).to_contain_text(NAME)
    assert row.get_attribute("data-campaign") == NAME
    no_script_ran(page, dialogs)

    page.goto(world.url(f"/campaigns/{quote(NAME, safe='')}"))
    expect(page.locator("body")).to_contain_text(NAME)
    # Two rows: the launched spec's own step "greet" (no jobs left under that name) and the
    # hostile step the jobs were renamed to, which the stored spec does not have (it comes last).
    steps = page.locator("tr[data-step]")
    expect(steps).to_have_count(2)
    step = steps.nth(1)
    expect(step).to_contain_text(STEP)
    assert steps.evaluate_all("rows => rows.map(r => r.dataset.step)") == ["greet", STEP]
    no_script_ran(page, dialogs)

    query = urlencode({"campaign": NAME, "step": STEP, "recipient": "eve@example.com"})
    page.goto(world.url(f"/preview?{query}"))
    preview = page.locator("[data-test=preview]")
    expect(preview).to_contain_text(SUBJECT)
    no_script_ran(page, dialogs)

    page.goto(world.url("/suppressions"))
    form = page.locator("[data-test=suppress-form]")
    form.locator("[name=address]").fill("eve@example.com")
    form.locator("[name=reason]").fill(REASON)
    form.locator("[data-test=suppress-submit]").click()
    expect(page.locator('tr[data-address="eve@example.com"]')).to_contain_text(REASON)
    no_script_ran(page, dialogs)
