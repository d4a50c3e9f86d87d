"""An operator's decisions through the dashboard, each seen in the database afterwards: resolve
in-doubt messages, retry a dead letter, suppress an address and lift the suppression."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from tests.browser.pages import log_in
from tests.browser.world import World, job_state, last_actor, suppressed


def test_an_in_doubt_message_resolved_in_the_page_changes_the_database(
    page: Page, world: World
) -> None:
    delivered, resend, _left_for_later = world.in_doubt
    log_in(page, world, "/in-doubt")
    row = page.locator(f'tr[data-job="{delivered}"]')
    evidence = row.locator("[data-test=evidence]")
    # The evidence an operator decides on: why it is in doubt (the connection dropped after
    # the message was handed over) and how many attempts were made.
    expect(evidence).to_contain_text("SMTPServerDisconnected")
    expect(evidence).to_contain_text("1")

    row.locator("[data-test=resolve-sent]").click()
    expect(page.locator("[data-test=flash]")).to_be_visible()
    expect(page.locator(f'tr[data-job="{delivered}"]')).to_have_count(0)
    assert job_state(world.engine, delivered) == "sent"
    assert last_actor(world.engine, delivered).startswith("dashboard:")

    page.locator(f'tr[data-job="{resend}"] [data-test=resolve-resend]').click()
    expect(page.locator("[data-test=flash]")).to_be_visible()
    expect(page.locator(f'tr[data-job="{resend}"]')).to_have_count(0)
    assert job_state(world.engine, resend) == "pending"
    assert last_actor(world.engine, resend).startswith("dashboard:")


def test_a_dead_letter_retried_in_the_page_is_pending_again(page: Page, world: World) -> None:
    key = world.dead[0]
    log_in(page, world, "/dead")
    row = page.locator(f'tr[data-job="{key}"]')
    expect(row).to_contain_text("gone-a@example.net")
    row.locator("[data-test=retry]").click()
    expect(page.locator("[data-test=flash]")).to_be_visible()
    expect(page.locator(f'tr[data-job="{key}"]')).to_have_count(0)
    assert job_state(world.engine, key) == "pending"
    assert last_actor(world.engine, key).startswith("dashboard:")
    assert job_state(world.engine, world.dead[1]) == "failed"  # only the one asked for


def test_an_address_suppressed_and_lifted_in_the_page(page: Page, world: World) -> None:
    address = "complainer@example.org"
    log_in(page, world, "/suppressions")
    form = page.locator("[data-test=suppress-form]")
    form.locator("[name=address]").fill(address)
    form.locator("[name=reason]").fill("asked by phone")
    form.locator("[data-test=suppress-submit]").click()
    row = page.locator(f'tr[data-address="{address}"]')
    expect(row).to_contain_text("asked by phone")
    assert (address, "global", "asked by phone") in suppressed(world.engine)

    # Found by searching for part of it; another search hides it.
    search = page.locator("input[name=q]")
    search.fill("complainer")
    search.press("Enter")
    expect(page.locator(f'tr[data-address="{address}"]')).to_have_count(1)
    search.fill("someone-else")
    search.press("Enter")
    expect(page.locator(f'tr[data-address="{address}"]')).to_have_count(0)

    page.goto(world.url("/suppressions?q=complainer"))
    page.locator(f'tr[data-address="{address}"] [data-test=unsuppress]').click()
    expect(page.locator("[data-test=flash]")).to_be_visible()
    expect(page.locator(f'tr[data-address="{address}"]')).to_have_count(0)
    assert address not in [a for a, _, _ in suppressed(world.engine)]
