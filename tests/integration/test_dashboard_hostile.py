"""Hostile data on every dashboard page: markup, script, template syntax and unicode in
campaign and step names, addresses, subjects, bodies, error texts and suppression reasons
reach the HTML as text. Each page is parsed: no element or attribute the templates do not
write, and the text (or attribute value) a browser would show equals what was stored.

The rows are written directly (launch would refuse most of these names): the dashboard must
be safe for whatever the database holds, not only for what Herald's validation lets in.
"""

from __future__ import annotations

from datetime import UTC, datetime
from email import message_from_bytes
from email import policy as email_policy
from email.message import EmailMessage
from pathlib import Path
from urllib.parse import quote, urlencode

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from sqlalchemy.engine import Engine

from campaigns.models import campaign_table
from dispatch.models import send_job, send_key, suppression
from dispatch.states import State
from tests.support.dashboard_client import DashClient
from tests.support.dashboard_setup import PASSWORD, dashboard_app, keys, launched, set_state
from tests.support.examples import examples
from tests.support.html_tree import assert_nothing_injected, parse

ATTACKS = [
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(1)>',
    "'><svg onload=alert(1)>",
    "{{ 7*7 }}{% raw %}",
    "</textarea></title></pre></iframe>",
    "&amp;&lt;&#x3c;",
    "javascript:alert(1)",
    "ü漢字🙂",
]
# What a page can hold: no control characters (the email library and the databases treat
# them specially), no line separators (a text body's lines are split on them).
characters = st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp"))


def hostile(max_size: int) -> st.SearchStrategy[str]:
    parts = st.lists(st.one_of(st.sampled_from(ATTACKS), st.text(characters, max_size=12)))
    return parts.map("".join).map(lambda s: s[:max_size]).filter(lambda s: s.strip() != "")


def message(subject: str, text: str) -> bytes:
    mail = EmailMessage()
    mail["From"] = "news@herald.test"
    mail["To"] = "someone@example.com"
    mail["Subject"] = subject
    mail.set_content(text)
    mail.add_alternative(f"<p>{text}</p><script>alert(2)</script>", subtype="html")
    return mail.as_bytes()


def stored_header(payload: bytes, name: str) -> str:
    parsed = message_from_bytes(payload, policy=email_policy.default)
    return str(parsed[name])


def plant(engine: Engine, name: str, step: str, address: str, text: str) -> list[str]:
    """The launched campaign renamed ``name``; one job of step ``step`` to ``address`` in
    each of in doubt, failed and sent, all carrying ``text``; a suppression of ``address``."""
    chosen = keys(engine)[:3]
    with engine.begin() as conn:
        conn.execute(sa.delete(suppression))
        conn.execute(sa.update(campaign_table).values(name=name))
        conn.execute(sa.update(send_job).values(campaign=name))
        conn.execute(
            sa.update(send_job)
            .where(send_job.c.key.in_(chosen))
            .values(step=step, recipient=address, payload=message(text, text))
        )
        # The jobs' identity as enqueue writes it (send_key mirrors send_job's).
        conn.execute(sa.update(send_key).values(campaign=name))
        conn.execute(sa.update(send_key).where(send_key.c.key.in_(chosen)).values(step=step))
        conn.execute(
            sa.insert(suppression).values(
                address=address, scope="global", reason=text, source="manual"
            )
        )
    set_state(engine, State.IN_DOUBT, [chosen[0]], in_doubt_reason=text, lease_owner=text[:128])
    set_state(engine, State.FAILED, [chosen[1]], outcome_text=text, outcome_code=550)
    set_state(engine, State.SENT, [chosen[2]], outcome_at=datetime.now(UTC))
    return chosen


@pytest.fixture
def base(engine: Engine, tmp_path: Path) -> Engine:
    launched(engine, tmp_path)
    return engine


@settings(
    max_examples=examples(12),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(name=hostile(120), step=hostile(60), address=hostile(300), text=hostile(400))
def test_hostile_values_are_shown_as_text(
    base: Engine, name: str, step: str, address: str, text: str
) -> None:
    assume(name not in (".", "..") and not name.startswith("./") and "/." not in name)
    in_doubt, failed, _ = plant(base, name, step, address, text)
    client = DashClient(dashboard_app(base))
    client.login(PASSWORD)

    campaigns = parse(client.get("/").text)
    assert_nothing_injected(campaigns)
    row = campaigns.one("tr", data_campaign=name)
    assert row.one("a", data_test="campaign-link").text() == name

    fragment = parse(client.get("/fragments/campaigns").text)
    assert_nothing_injected(fragment, scripts=0)
    fragment.one("tr", data_campaign=name)

    detail_answer = client.get(f"/campaigns/{quote(name, safe='')}")
    assert detail_answer.status_code == 200
    detail = parse(detail_answer.text)
    assert_nothing_injected(detail, scripts=0)
    assert detail.one("tr", data_step=step).find_all("td")[0].text() == step
    chart = detail.one("svg", data_test="sends-chart")
    assert chart.find_all("title")[0].text().startswith(f"Sends of {name} per ")

    doubt = parse(client.get("/in-doubt").text)
    assert_nothing_injected(doubt, scripts=0)
    evidence = doubt.one("tr", data_job=in_doubt).one(data_test="evidence")
    assert f"reason: {text}" in [li.text() for li in evidence.find_all("li")]
    assert f"lease owner: {text[:128]}" in [li.text() for li in evidence.find_all("li")]

    dead = parse(client.get("/dead").text)
    assert_nothing_injected(dead, scripts=0)
    error = dead.one("tr", data_job=failed).one(data_test="error-text")
    assert error.text() == f"550 {text}"

    listing = parse(client.get("/suppressions?" + urlencode({"q": address})).text)
    assert_nothing_injected(listing, scripts=0)
    entry = listing.one("tr", data_address=address)
    assert [td.text() for td in entry.find_all("td")[:3]] == [address, "global", text]
    assert listing.one("input", name="q").attrs["value"] == address

    query = urlencode({"campaign": name, "step": step, "recipient": address})
    preview = parse(client.get(f"/preview?{query}").text)
    assert_nothing_injected(preview, scripts=0)
    shown = preview.find_all(data_test="preview")
    assert len(shown) == 3
    with base.connect() as conn:
        payload = conn.execute(
            sa.select(send_job.c.payload).where(send_job.c.key == in_doubt)
        ).scalar_one()
    headers = {
        tr.find_all("th")[0].text(): tr.find_all("td")[0].text()
        for tr in shown[0].one("table", data_test="headers").find_all("tr")
    }
    assert headers["Subject"] == stored_header(payload, "Subject")
    assert shown[0].one(data_test="text-body").text() == text + "\n"
    frame = shown[0].one("iframe", data_test="html-body")
    assert frame.attrs["srcdoc"] == f"<p>{text}</p><script>alert(2)</script>\n"
    assert frame.attrs["sandbox"] in ("", None)  # present, allowing nothing
