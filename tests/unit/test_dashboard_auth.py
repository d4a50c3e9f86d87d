"""The dashboard's session cookies, CSRF tokens, flash messages, login limit, settings and
chart geometry, without a database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from dispatch.signed_tokens import SigningKeys
from herald.secrets import known_secrets
from herald.serve.dashboard import auth
from herald.serve.dashboard.chart import HEIGHT, sends_chart
from herald.serve.dashboard.reads import Buckets, _width
from herald.serve.dashboard.settings import DashboardSettings
from herald.serve.dashboard.web import safe_next, when

KEYS = SigningKeys.parse("k1:0123456789abcdef0123")
SETTINGS = DashboardSettings.derived("pw", "tok", KEYS)
NOW = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def test_cookie_round_trip_expiry_and_tampering() -> None:
    cookie = auth.new_cookie(SETTINGS, "password", NOW)
    session = auth.read_cookie(SETTINGS, cookie, NOW + timedelta(hours=11))
    assert session is not None
    assert (session.login, session.actor, session.bearer) == (
        "password",
        "dashboard:password",
        False,
    )
    assert auth.read_cookie(SETTINGS, cookie, NOW + timedelta(hours=12, seconds=1)) is None
    login, sid, expires, mac = cookie.split(".")
    for forged in (
        f"token.{sid}.{expires}.{mac}",
        f"{login}.{sid}.{int(expires) + 3600}.{mac}",
        f"{login}.{sid}.{expires}.{'0' * len(mac)}",
        f"{login}.{sid}.{expires}",
        "",
    ):
        assert auth.read_cookie(SETTINGS, forged, NOW) is None, forged


def test_changing_a_secret_ends_every_session() -> None:
    cookie = auth.new_cookie(SETTINGS, "password", NOW)
    for changed in (
        DashboardSettings.derived("pw2", "tok", KEYS),
        DashboardSettings.derived("pw", "tok2", KEYS),
        DashboardSettings.derived("pw", "tok", SigningKeys.parse("k2:fedcba9876543210fedc")),
    ):
        assert auth.read_cookie(changed, cookie, NOW) is None
    # A login that no longer exists (the token was removed) is refused even when signed.
    no_token = DashboardSettings.derived("pw", None, KEYS)
    token_cookie = auth.new_cookie(no_token, "token", NOW)
    assert auth.read_cookie(no_token, token_cookie, NOW) is None


@given(st.text(max_size=80))
def test_only_the_secrets_log_in(secret: str) -> None:
    expected = {"pw": "password", "tok": "token"}.get(secret)
    assert auth.login_for(SETTINGS, secret) == expected


def test_bearer_is_the_token_only() -> None:
    assert auth.bearer(SETTINGS, "Bearer tok") == auth.Session("token", "bearer", bearer=True)
    assert auth.bearer(SETTINGS, "bearer  tok ") is not None
    for header in (None, "", "Bearer pw", "Basic tok", "Bearer", "tok"):
        assert auth.bearer(SETTINGS, header) is None
    assert auth.bearer(DashboardSettings.derived("pw", None, KEYS), "Bearer ") is None


def test_csrf_token_is_bound_to_the_session() -> None:
    one = auth.read_cookie(SETTINGS, auth.new_cookie(SETTINGS, "password", NOW), NOW)
    two = auth.read_cookie(SETTINGS, auth.new_cookie(SETTINGS, "password", NOW), NOW)
    assert one is not None
    assert two is not None
    token = auth.csrf_token(SETTINGS, one)
    assert auth.csrf_ok(SETTINGS, one, token)
    assert not auth.csrf_ok(SETTINGS, two, token)
    assert not auth.csrf_ok(SETTINGS, one, None)
    assert not auth.csrf_ok(SETTINGS, one, token.upper())


def test_flash_is_bound_to_the_session() -> None:
    session = auth.Session("password", "abc")
    signed = auth.sign_flash(SETTINGS, session, "Job <b> done ✓")
    assert auth.read_flash(SETTINGS, session, signed) == "Job <b> done ✓"
    assert auth.read_flash(SETTINGS, auth.Session("password", "other"), signed) is None
    planted = "41." + signed.partition(".")[2]
    assert auth.read_flash(SETTINGS, session, planted) is None


def test_login_limiter_counts_failures_in_a_window() -> None:
    now = [NOW]
    limiter = auth.LoginLimiter(lambda: now[0], limit=3)
    for _ in range(3):
        assert not limiter.blocked()
        limiter.failed()
    assert limiter.blocked()
    now[0] += auth.FAILURE_WINDOW
    assert not limiter.blocked()


def test_safe_next_keeps_local_paths_only() -> None:
    assert safe_next("/dead?x=1") == "/dead?x=1"
    for target in (None, "", "//evil.example", "https://evil.example/", "/\\evil", "evil"):
        assert safe_next(target) == "/"


def test_settings_from_env_and_secrets_learnt() -> None:
    off = DashboardSettings.from_env(KEYS, environ={})
    assert not off.enabled
    on = DashboardSettings.from_env(
        KEYS, environ={"HERALD_DASHBOARD_PASSWORD": " hunter2-long-pw "}
    )
    assert on.enabled
    assert on.password == "hunter2-long-pw"
    assert on.token is None
    assert "hunter2-long-pw" not in repr(on)
    assert "hunter2-long-pw" not in known_secrets.scrub("pw is hunter2-long-pw")


def test_when_formats_utc() -> None:
    assert when(NOW) == "2026-03-01 09:00:00 UTC"
    assert when("2026-03-01T10:00:00+01:00") == "2026-03-01 10:00:00 +0100"
    assert when(None) == ""


def test_chart_geometry_scales_to_the_peak() -> None:
    chart = sends_chart(Buckets(NOW, timedelta(minutes=1), [2, 0, 4]))
    assert chart.unit == "minute"
    assert chart.peak == 4
    assert chart.total == 6
    assert len(chart.bars) == 2  # the empty minute draws nothing
    tall = chart.bars[1]
    assert tall.y == chart.plot_top
    assert tall.y + tall.height == HEIGHT - 28
    assert chart.bars[0].height == tall.height / 2
    assert chart.bars[1].title == "2026-03-01 09:02 UTC: 4 sent"
    assert (chart.first_label, chart.last_label) == ("2026-03-01 09:00", "2026-03-01 09:02")


def test_bucket_width_keeps_the_chart_under_180_bars() -> None:
    assert _width(timedelta(minutes=90)) == timedelta(minutes=1)
    assert _width(timedelta(hours=5)) == timedelta(hours=1)
    assert _width(timedelta(days=30)) == timedelta(days=1)
