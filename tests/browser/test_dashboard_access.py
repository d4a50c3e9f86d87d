"""Logging in to the dashboard, and the actions it refuses: without a session, with a forged
CSRF token. Every refusal is checked in the database too: nothing changed."""

from __future__ import annotations

import re

from playwright.sync_api import Browser, Page, expect

from herald.app.suppress import add
from tests.browser.pages import has_session_cookie, log_in
from tests.browser.world import TOKEN, World, job_state, suppressed


def test_a_wrong_secret_is_refused_and_the_right_one_lets_you_in(page: Page, world: World) -> None:
    page.goto(world.url("/"))
    # Without a session every page leads to the login form, remembering where you were going.
    expect(page).to_have_url(re.compile(r"/login\?next="))
    form = page.locator("form[data-test=login]")
    secret = form.locator("input[name=secret]")
    expect(secret).to_have_attribute("type", "password")

    secret.fill("not-the-password")
    with page.expect_response(lambda r: r.request.method == "POST") as answer:
        form.locator("[data-test=login-submit]").click()
    assert answer.value.status == 401
    expect(page.locator("[data-test=error]")).to_be_visible()
    assert not has_session_cookie(page)

    log_in(page, world, "/in-doubt")
    cookie = next(c for c in page.context.cookies() if c["name"] == "herald_session")
    assert cookie["httpOnly"]
    assert cookie["sameSite"] == "Strict"
    expect(page.locator("[data-test=nav-campaigns]")).to_be_visible()
    for key in world.in_doubt:
        expect(page.locator(f'tr[data-job="{key}"]')).to_have_count(1)

    for name, path in (
        ("dead", "/dead"),
        ("suppressions", "/suppressions"),
        ("in-doubt", "/in-doubt"),
    ):
        page.locator(f"[data-test=nav-{name}]").click()
        expect(page).to_have_url(world.url(path))
    page.locator("[data-test=nav-campaigns]").click()
    expect(page.locator("table[data-test=campaigns]")).to_be_visible()


def test_actions_without_a_session_are_refused_and_change_nothing(
    browser: Browser, world: World
) -> None:
    add(world.engine, ["former-member@example.org"], scope="global", reason="asked by letter")
    context = browser.new_context()
    try:
        request = context.request  # the page's own HTTP client, without any cookie
        key = world.dead[-1]
        refused: dict[str, dict[str, str | float | bool]] = {
            "/in-doubt/resolve": {"key": world.in_doubt[-1], "outcome": "sent"},
            "/dead/retry": {"key": key},
            "/suppressions": {"address": "nobody@example.org", "scope": "global", "reason": "x"},
            "/suppressions/remove": {"address": "former-member@example.org", "scope": "global"},
        }
        for path, form in refused.items():
            answer = request.post(world.url(path), form=form, max_redirects=0)
            assert answer.status == 403, (path, answer.status)
        page = request.get(world.url("/dead"), max_redirects=0)
        assert page.status == 303
        assert "/login?next=" in page.headers["location"]
        # A script with the token needs no session and no CSRF token: it may read.
        scripted = request.get(
            world.url("/in-doubt"), headers={"Authorization": f"Bearer {TOKEN}"}, max_redirects=0
        )
        assert scripted.status == 200
        wrong = request.get(
            world.url("/in-doubt"), headers={"Authorization": "Bearer nope"}, max_redirects=0
        )
        assert wrong.status in (303, 401, 403)
    finally:
        context.close()
    assert job_state(world.engine, world.in_doubt[-1]) == "in_doubt"
    assert job_state(world.engine, key) == "failed"
    addresses = [address for address, _, _ in suppressed(world.engine)]
    assert "nobody@example.org" not in addresses
    assert "former-member@example.org" in addresses


def test_a_form_sent_after_the_session_ended_is_refused(page: Page, world: World) -> None:
    key = world.dead[-1]
    log_in(page, world, "/dead")
    page.context.clear_cookies()  # the session expired, or the operator logged out elsewhere
    with page.expect_response(lambda r: r.request.method == "POST") as answer:
        page.locator(f'tr[data-job="{key}"] [data-test=retry]').click()
    assert answer.value.status == 403
    expect(page.locator("[data-test=error]")).to_be_visible()
    assert job_state(world.engine, key) == "failed"


def test_a_forged_csrf_token_is_refused_and_changes_nothing(page: Page, world: World) -> None:
    log_in(page, world, "/suppressions")
    form = page.locator("[data-test=suppress-form]")
    form.locator("[name=address]").fill("forged@example.org")
    form.locator("[name=reason]").fill("should never be stored")
    form.locator("input[name=csrf_token]").evaluate("field => { field.value = 'forged' }")
    with page.expect_response(lambda r: r.request.method == "POST") as answer:
        form.locator("[data-test=suppress-submit]").click()
    assert answer.value.status == 403
    expect(page.locator("[data-test=error]")).to_be_visible()
    assert "forged@example.org" not in [address for address, _, _ in suppressed(world.engine)]

    # The same on the in-doubt page: the token removed altogether.
    key = world.in_doubt[-1]
    page.goto(world.url("/in-doubt"))
    row = page.locator(f'tr[data-job="{key}"]')
    row.locator("input[name=csrf_token]").evaluate("field => field.remove()")
    with page.expect_response(lambda r: r.request.method == "POST") as answer:
        row.locator("[data-test=resolve-sent]").click()
    assert answer.value.status == 403
    assert job_state(world.engine, key) == "in_doubt"
