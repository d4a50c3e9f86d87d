"""Every path that composes messages carries the links it is given (scheduled fires, drips,
scheduler passes, new versions), and the ``/u/<token>`` app refuses any tampered token without
writing anything (hypothesis, through the ASGI app on SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.engine import Engine

from dispatch.models import send_job
from dispatch.signed_tokens import SigningKeys, unsubscribe_token
from herald.app.launch import launch
from herald.app.scheduler_pass import ScheduledPass
from herald.errors import ConfigError
from herald.mail_settings import MailSettings
from herald.serve.app import build_app
from herald.serve.unsubscribe import is_one_click
from scheduler.passes import run_pass
from scheduler.unsubscribe_links import UnsubscribeLinks
from tests.support.examples import examples
from tests.support.schedules import write_scheduled

T0 = datetime(2026, 1, 6, 10, 0, tzinfo=UTC)
KEYS = SigningKeys.parse("k1:unit-secret-0123456789")
LINKS = UnsubscribeLinks(KEYS, "https://u.herald.test")
PEOPLE = [("ann@example.com", "Ann"), ("bob@example.com", "Bob")]


def payloads(engine: Engine) -> list[bytes]:
    with engine.connect() as conn:
        return [bytes(p) for p in conn.execute(sa.select(send_job.c.payload)).scalars()]


def test_a_schedule_fired_by_launch_and_by_later_passes_carries_the_headers(
    engine: Engine, tmp_path: Path
) -> None:
    body = "audience: people.csv\nschedule: {every: 6h}\nsteps: [{id: p, subject: P, text: Hi}]\n"
    path = write_scheduled(tmp_path / "c", body, PEOPLE)
    launched = launch(engine, path, clock=lambda: T0, actor="test", links=LINKS)
    assert launched.fanout.new_jobs == 2
    summary = ScheduledPass(links=LINKS)(engine, now=T0 + timedelta(hours=6, seconds=1), actor="t")
    assert summary.report.new_jobs == 2
    found = payloads(engine)
    assert len(found) == 4
    assert all(b"\r\nList-Unsubscribe: <https://u.herald.test/u/1.k1." in p for p in found)
    assert all(b"\r\nList-Unsubscribe-Post: List-Unsubscribe=One-Click\r\n" in p for p in found)


def test_drip_steps_materialised_by_passes_carry_the_headers(
    engine: Engine, tmp_path: Path
) -> None:
    body = (
        "enrollment: audience\naudience: people.csv\nsteps:\n"
        "  - {id: welcome, subject: W, html: '<a href=\"{{ unsubscribe_url }}\">u</a>'}\n"
        "  - {id: tips, after: 1d, subject: T, text: 'Stop: {{ unsubscribe_url }}'}\n"
    )
    path = write_scheduled(tmp_path / "c", body, PEOPLE)
    launch(engine, path, clock=lambda: T0, actor="test", links=LINKS)
    with engine.begin() as conn:  # settle the first step so the drip moves on
        conn.execute(sa.update(send_job).values(state="sent", outcome_at=T0 + timedelta(minutes=1)))
    run_pass(engine, now=T0 + timedelta(days=1, minutes=1), actor="t", links=LINKS)
    found = payloads(engine)
    assert len(found) == 4
    assert all(b"List-Unsubscribe: <https://u.herald.test/u/" in p for p in found)
    assert all(b"u.herald.test/u/1.k1." in p.split(b"\r\n\r\n", 1)[1] for p in found)


def test_build_app_needs_the_signing_keys(engine: Engine) -> None:
    with pytest.raises(ConfigError, match="HERALD_SIGNING_KEYS"):
        build_app(engine, MailSettings())


ascii_text = st.text(st.characters(min_codepoint=33, max_codepoint=126, exclude_characters="/?#%"))


@settings(
    max_examples=examples(60),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    mailbox=st.emails(),
    position=st.integers(min_value=0),
    replacement=st.sampled_from("AZaz09-_."),
    junk=ascii_text,
)
def test_tampered_tokens_get_404_and_write_nothing(
    engine: Engine, mailbox: str, position: int, replacement: str, junk: str
) -> None:
    app = build_app(engine, MailSettings(signing_keys=KEYS))
    token = unsubscribe_token(KEYS, mailbox=mailbox, scope="list:n", campaign="n")
    index = position % len(token)
    altered = token[:index] + replacement + token[index + 1 :]
    before = suppressed(engine)

    async def requests() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            return [
                await client.request(method, f"/u/{bad}", data={"List-Unsubscribe": "One-Click"})
                for bad in {altered, junk or "x", token + junk} - {token}
                for method in ("GET", "POST")
            ]

    for answer in asyncio.run(requests()):
        # 200 only for a spelling that decodes to the very bytes signed (base64 ignores the
        # unused low bits of the last character): the same claim, the same mailbox.
        assert answer.status_code in (200, 404), (answer.request.url, answer.status_code)
        assert "set-cookie" not in answer.headers
    assert suppressed(engine) - before <= {mailbox}


def suppressed(engine: Engine) -> set[str]:
    with engine.connect() as conn:
        return set(conn.execute(sa.text("select address from suppression")).scalars())


@given(
    content_type=st.sampled_from(["", "multipart/form-data; boundary=x", "text/plain"]),
    body=st.binary(max_size=300),
)
def test_reading_any_body_never_fails(content_type: str, body: bytes) -> None:
    assert is_one_click(content_type, body) in (True, False)
