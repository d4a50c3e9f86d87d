"""The dashboard through its ASGI app on SQLite and PostgreSQL: login, pages, and every action
changing the database exactly when it should (a session, the session's CSRF token, this
origin) and not at all otherwise."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dispatch.states import State
from herald.app import suppress
from herald.serve.dashboard.auth import MAX_FAILURES
from tests.support.dashboard_client import DashClient
from tests.support.dashboard_setup import (
    PASSWORD,
    TOKEN,
    dashboard_app,
    keys,
    launched,
    set_state,
    snapshot,
    state_of,
)
from tests.support.html_tree import parse

PAGES = [
    "/",
    "/fragments/campaigns",
    "/campaigns/onboarding",
    "/in-doubt",
    "/dead",
    "/suppressions?q=a",
    "/preview?campaign=onboarding&step=welcome&recipient=user00000@example.com",
]


# How a browser marks a request another site started (or one it will not vouch for).
FOREIGN = [
    {"origin": "https://evil.example"},
    {"origin": "http://herald.test.evil.example"},
    {"origin": "null"},  # no Sec-Fetch-Site saying it is ours
    {"origin": "null", "sec-fetch-site": "cross-site"},
    {"sec-fetch-site": "same-site"},
    {"origin": "http://herald.test", "sec-fetch-site": "cross-site"},
]


def logged_in(engine: Engine, secret: str = PASSWORD) -> DashClient:
    client = DashClient(dashboard_app(engine))
    client.login(secret)
    return client


def posts(engine: Engine) -> list[tuple[str, dict[str, str]]]:
    """One valid form for every action (before its CSRF token is added)."""
    all_keys = keys(engine)
    return [
        ("/in-doubt/resolve", {"key": all_keys[0], "outcome": "sent"}),
        ("/dead/retry", {"key": all_keys[1]}),
        ("/suppressions", {"address": "new@example.com", "scope": "global", "reason": "r"}),
        ("/suppressions/remove", {"address": "old@example.com", "scope": "global"}),
        ("/campaigns/control", {"campaign": "onboarding", "action": "pause"}),
        ("/logout", {}),
    ]


@pytest.fixture
def prepared(engine: Engine, tmp_path: Path) -> Engine:
    """A campaign with one job in doubt and one failed, and one suppressed address."""
    launched(engine, tmp_path)
    all_keys = keys(engine)
    set_state(engine, State.IN_DOUBT, [all_keys[0]], in_doubt_reason="connection lost after DATA")
    set_state(engine, State.FAILED, [all_keys[1]], outcome_code=550, outcome_text="no mailbox")
    suppress.add(engine, ["old@example.com"], scope="global", reason="asked")
    return engine


def test_login_with_password_or_token_and_wrong_secret_is_401(prepared: Engine) -> None:
    client = DashClient(dashboard_app(prepared))
    assert client.get("/login").status_code == 200
    wrong = client.post("/login", data={"secret": "nope", "next": "/"})
    assert wrong.status_code == 401
    assert parse(wrong.text).find_all(data_test="error")
    assert "herald_session" not in wrong.headers.get("set-cookie", "")
    ok = client.post("/login", data={"secret": PASSWORD, "next": "/dead"})
    assert (ok.status_code, ok.headers["location"]) == (303, "/dead")
    cookie = ok.headers["set-cookie"]
    assert "herald_session=password." in cookie
    assert "HttpOnly" in cookie
    assert "SameSite=strict" in cookie
    assert "Path=/" in cookie
    assert "Secure" not in cookie  # plain http here; https sets it (below)
    assert client.get("/").status_code == 200
    other = DashClient(dashboard_app(prepared))
    assert other.post("/login", data={"secret": TOKEN}).status_code == 303
    assert other.get("/dead").status_code == 200


def test_cookie_is_secure_over_https_and_next_stays_local(prepared: Engine) -> None:
    client = DashClient(dashboard_app(prepared), base_url="https://herald.test")
    answer = client.post("/login", data={"secret": PASSWORD, "next": "//evil.example/x"})
    assert answer.headers["location"] == "/"
    assert "Secure" in answer.headers["set-cookie"]


@pytest.mark.parametrize("page", PAGES)
def test_every_page_redirects_to_login_without_a_session(prepared: Engine, page: str) -> None:
    client = DashClient(dashboard_app(prepared))
    answer = client.get(page)
    assert answer.status_code == 303
    assert answer.headers["location"] == f"/login?next={quote(page, safe='')}"
    client.cookies.set("herald_session", "password.abc.9999999999.forged", domain="herald.test")
    assert client.get(page).status_code == 303


def test_every_page_renders_with_security_headers(prepared: Engine) -> None:
    client = logged_in(prepared)
    for page in PAGES:
        answer = client.get(page)
        assert answer.status_code == 200, page
        policy = answer.headers["content-security-policy"]
        assert "default-src 'none'" in policy
        assert "frame-ancestors 'none'" in policy
        assert "script-src 'nonce-" in policy
        assert "unsafe-inline" not in policy.split(";")[1]
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert answer.headers["referrer-policy"] == "no-referrer"
        assert answer.headers["cache-control"] == "no-store"
    tree = parse(client.get("/").text)
    for nav in ("nav-campaigns", "nav-in-doubt", "nav-dead", "nav-suppressions"):
        tree.one("a", data_test=nav)


def test_every_post_refuses_without_session_bad_csrf_or_foreign_origin(prepared: Engine) -> None:
    before = snapshot(prepared)
    anonymous = DashClient(dashboard_app(prepared))
    client = logged_in(prepared)
    token = client.csrf()
    for path, form in posts(prepared):
        assert anonymous.post(path, data=form).status_code == 403, path
        assert anonymous.post(path, data={**form, "csrf_token": token}).status_code == 403, path
        for bad in ({}, {"csrf_token": ""}, {"csrf_token": "0" * 64}, {"csrf_token": token[:-1]}):
            answer = client.post(path, data={**form, **bad})
            assert answer.status_code == 403, (path, bad)
            assert parse(answer.text).find_all(data_test="error")
        for foreign in FOREIGN:
            answer = client.post(path, data={**form, "csrf_token": token}, headers=foreign)
            assert answer.status_code == 403, (path, foreign)
    assert snapshot(prepared) == before
    # Another session's token is not this session's.
    assert logged_in(prepared).csrf() != token


def test_resolve_in_doubt_each_outcome_changes_the_job(engine: Engine, tmp_path: Path) -> None:
    launched(engine, tmp_path)
    chosen = keys(engine)[:3]
    set_state(engine, State.IN_DOUBT, chosen, in_doubt_reason="timeout after DATA")
    client = logged_in(engine)
    page = parse(client.get("/in-doubt").text)
    row = page.one("tr", data_job=chosen[0])
    assert "timeout after DATA" in row.one(data_test="evidence").text()
    for name in ("resolve-sent", "resolve-failed", "resolve-resend"):
        row.one("button", data_test=name)
    token = client.csrf("/in-doubt")
    for key, outcome, state in zip(
        chosen, ("sent", "failed", "resend"), ("sent", "failed", "pending"), strict=True
    ):
        answer = client.post(
            "/in-doubt/resolve", data={"key": key, "outcome": outcome, "csrf_token": token}
        )
        assert (answer.status_code, answer.headers["location"]) == (303, "/in-doubt")
        assert state_of(engine, key) == state
        back = parse(client.get("/in-doubt").text)
        assert key[:16] in back.one(data_test="flash").text()
        assert not back.find_all("tr", data_job=key)
    with engine.connect() as conn:
        actors = conn.execute(
            sa.text(
                "select e.actor from send_event e join send_job j on j.id = e.job_id"
                " where j.key = :k and e.to_state = 'sent'"
            ),
            {"k": chosen[0]},
        ).scalars()
        assert list(actors) == ["dashboard:password"]
    again = client.post(
        "/in-doubt/resolve", data={"key": chosen[0], "outcome": "failed", "csrf_token": token}
    )
    assert again.status_code == 303
    assert state_of(engine, chosen[0]) == "sent"  # no longer in doubt: unchanged
    assert "not changed" in parse(client.get("/in-doubt").text).one(data_test="flash").text()


def test_retry_dead_rearms_the_job(prepared: Engine) -> None:
    failed = keys(prepared)[1]
    client = logged_in(prepared)
    row = parse(client.get("/dead").text).one("tr", data_job=failed)
    assert "no mailbox" in row.one(data_test="evidence").text()
    answer = client.post("/dead/retry", data={"key": failed, "csrf_token": client.csrf("/dead")})
    assert answer.status_code == 303
    assert state_of(prepared, failed) == "pending"
    client.get("/fragments/campaigns")  # the live refresh leaves the flash for the page
    assert "fresh attempts" in parse(client.get("/dead").text).one(data_test="flash").text()
    assert not parse(client.get("/dead").text).find_all(data_test="flash")  # shown once


def test_bearer_token_acts_without_cookie_or_csrf(prepared: Engine) -> None:
    failed = keys(prepared)[1]
    client = DashClient(dashboard_app(prepared))
    auth = {"authorization": f"Bearer {TOKEN}"}
    assert client.get("/dead", headers=auth).status_code == 200
    assert client.post("/dead/retry", data={"key": failed}, headers=auth).status_code == 303
    assert state_of(prepared, failed) == "pending"
    wrong = {"authorization": f"Bearer {PASSWORD}"}  # the password is not a bearer token
    assert client.get("/dead", headers=wrong).status_code == 303
    assert client.post("/dead/retry", data={"key": failed}, headers=wrong).status_code == 403


def test_suppress_search_add_remove(prepared: Engine) -> None:
    client = logged_in(prepared)
    token = client.csrf()
    added = client.post(
        "/suppressions",
        data={"address": "Someone@Example.COM", "scope": "list:news", "reason": "phone call"},
        headers={"origin": "http://herald.test"},
    )
    assert added.status_code == 403  # no token
    added = client.post(
        "/suppressions",
        data={
            "address": "Someone@Example.COM",
            "scope": "list:news",
            "reason": "phone call",
            "csrf_token": token,
        },
        headers={"origin": "http://herald.test"},
    )
    assert added.status_code == 303
    entries = {(e.address, e.scope) for e in suppress.list_entries(prepared)}
    assert ("someone@example.com", "list:news") in entries
    # What Chromium sends for our own form under Referrer-Policy: no-referrer.
    own_form = {"origin": "null", "sec-fetch-site": "same-origin"}
    again = client.post(
        "/suppressions",
        data={"address": "b@example.com", "reason": "r", "csrf_token": token},
        headers=own_form,
    )
    assert again.status_code == 303
    assert ("b@example.com", "global") in {
        (e.address, e.scope) for e in suppress.list_entries(prepared)
    }
    page = parse(client.get(added.headers["location"]).text)
    assert "now suppressed" in page.one(data_test="flash").text()
    row = page.one("tr", data_address="someone@example.com")
    row.one("button", data_test="unsuppress")
    assert not page.find_all("tr", data_address="old@example.com")  # the search filters
    assert parse(client.get("/suppressions").text).find_all("tr", data_address="old@example.com")
    bad = client.post(
        "/suppressions", data={"address": "not an address", "reason": "x", "csrf_token": token}
    )
    assert bad.status_code == 303
    assert "Not added" in parse(client.get("/suppressions").text).one(data_test="flash").text()
    removed = client.post(
        "/suppressions/remove",
        data={"address": "someone@example.com", "scope": "list:news", "csrf_token": token},
    )
    assert removed.status_code == 303
    entries = {(e.address, e.scope) for e in suppress.list_entries(prepared)}
    assert ("someone@example.com", "list:news") not in entries


def test_campaign_page_steps_in_order_chart_and_pause(prepared: Engine) -> None:
    sent = keys(prepared)[2:5]
    set_state(prepared, State.SENT, sent, outcome_at=datetime.now(UTC))
    client = logged_in(prepared)
    overview = parse(client.get("/").text)
    row = overview.one("tr", data_campaign="onboarding")
    assert row.one(data_test="sent").text() == "3"
    assert row.one(data_test="total").text() == "9"
    page = parse(client.get("/campaigns/onboarding").text)
    steps = [n.attrs["data-step"] for n in page.find_all("tr") if "data-step" in n.attrs]
    assert steps == ["welcome", "tips", "later"]  # the campaign's order
    chart = page.one("svg", data_test="sends-chart")
    assert "3 sent" in chart.text()
    answer = client.post(
        "/campaigns/control",
        data={"campaign": "onboarding", "action": "pause", "csrf_token": client.csrf()},
    )
    assert answer.status_code == 303
    assert snapshot(prepared)["campaigns"] == [("onboarding", "paused")]
    assert client.get("/campaigns/nope").status_code == 404


def test_preview_shows_the_stored_message(prepared: Engine) -> None:
    client = logged_in(prepared)
    page = parse(client.get(PAGES[-1]).text)
    shown = page.one(data_test="preview")
    headers = shown.one("table", data_test="headers").text()
    assert "Welcome User 0" in headers
    assert "user00000@example.com" in headers
    assert "<p>Hello <b>User 0</b>" in shown.one("iframe").attrs["srcdoc"]  # type: ignore[operator]
    assert "sandbox" in shown.one("iframe").attrs
    assert "Hello User 0 from City0." in shown.one(data_test="text-body").text()
    missing = parse(client.get("/preview?campaign=onboarding&step=welcome&recipient=x@y.z").text)
    assert missing.find_all(data_test="error")
    assert not missing.find_all(data_test="preview")


def test_logout_ends_the_session(prepared: Engine) -> None:
    client = logged_in(prepared)
    answer = client.post("/logout", data={"csrf_token": client.csrf()})
    assert answer.status_code == 303
    assert client.get("/").status_code == 303


def test_dashboard_off_without_secrets(engine: Engine) -> None:
    client = DashClient(dashboard_app(engine, password=None, token=None))
    for page in ("/", "/login", "/in-doubt"):
        assert client.get(page).status_code == 404
    assert client.post("/login", data={"secret": ""}).status_code == 404
    assert client.get("/healthz").status_code == 200


def test_failed_logins_are_limited_by_count(engine: Engine) -> None:
    client = DashClient(dashboard_app(engine))
    for _ in range(MAX_FAILURES):
        assert client.post("/login", data={"secret": "guess"}).status_code == 401
    blocked = client.post("/login", data={"secret": PASSWORD})
    assert blocked.status_code == 429
    assert "herald_session" not in blocked.headers.get("set-cookie", "")
    assert parse(blocked.text).find_all(data_test="error")


def test_oversized_or_unparsable_forms_change_nothing(prepared: Engine) -> None:
    client = logged_in(prepared)
    token = client.csrf()
    before = snapshot(prepared)
    huge = client.post(
        "/suppressions",
        data={"address": "x@example.com", "reason": "r" * 70_000, "csrf_token": token},
    )
    assert huge.status_code == 413
    multipart = client.post(
        "/suppressions",
        files={"address": (None, "x@example.com"), "csrf_token": (None, token)},
    )
    assert multipart.status_code == 403
    assert snapshot(prepared) == before
