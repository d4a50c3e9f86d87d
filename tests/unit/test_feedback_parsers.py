"""Bounce and complaint parsers: what each report means, and that hostile input never raises."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from campaigns.feedback import classify_status, classify_text
from campaigns.feedback_providers import (
    mailgun_events,
    postmark_events,
    sendgrid_events,
    ses_events,
)
from campaigns.feedback_report import parse_report
from tests.support import reports
from tests.support.examples import examples

KEY = "ab" * 32
VERDICTS = {"hard", "soft", "policy", "delayed", "complaint", "unsubscribe", "none", "unknown"}


@pytest.mark.parametrize(
    ("status", "verdict"),
    [
        ("5.1.1", "hard"),
        ("5.1.2", "hard"),
        ("5.1.3", "hard"),
        ("5.1.10", "hard"),
        ("5.2.1", "hard"),
        ("5.4.4", "hard"),
        ("5.1.7", "policy"),  # the SENDER's address: our configuration, not the recipient
        ("5.1.8", "policy"),
        ("5.7.1", "policy"),  # Gmail: spam, policy and rate limits
        ("5.7.26", "policy"),
        ("4.7.0", "policy"),
        ("5.2.2", "soft"),  # mailbox full
        ("5.3.4", "soft"),  # message too big: fix the message, keep the address
        ("5.6.0", "soft"),
        ("4.2.2", "soft"),
        ("4.4.1", "soft"),
        ("4.1.1", "soft"),  # a transient class never suppresses
        ("2.0.0", "none"),
        ("9.9.9", "unknown"),
        ("5.1", "unknown"),
    ],
)
def test_status_codes(status: str, verdict: str) -> None:
    assert classify_status(status) == verdict


def test_text_without_an_enhanced_code() -> None:
    assert classify_text("550 sorry, no such user here") == ("hard", None)
    assert classify_text("550 too much mail from your IP") == ("soft", None)
    assert classify_text("421 try later") == ("soft", None)
    assert classify_text("we are closed") == ("unknown", None)


def test_a_hard_bounce_dsn() -> None:
    report = parse_report(reports.dsn(herald_key=KEY))
    assert report.verdict == "hard"
    assert report.status == "5.1.1"
    assert report.recipient == "alice@example.org"
    assert report.report_id == "<dsn-1@mx.example.org>"
    assert report.herald_key == KEY
    assert "User unknown" in report.detail


def test_a_generic_status_defers_to_the_diagnostic_code() -> None:
    report = parse_report(reports.dsn(status="5.0.0"))
    assert (report.verdict, report.status) == ("hard", "5.1.1")


def test_a_missing_status_reads_the_diagnostic_code() -> None:
    report = parse_report(reports.dsn(status="", diagnostic="smtp; 552 5.2.2 mailbox full"))
    assert (report.verdict, report.status) == ("soft", "5.2.2")


@pytest.mark.parametrize(
    ("action", "status", "diagnostic", "verdict"),
    [
        ("failed", "4.4.7", "smtp; 421 4.4.7 timeout", "soft"),
        ("delayed", "4.4.1", "smtp; 421 4.4.1 try later", "delayed"),
        ("delivered", "2.0.0", "smtp; 250 2.0.0 ok", "none"),
        ("failed", "5.7.1", "smtp; 550 5.7.1 blocked by policy", "policy"),
        ("failed", "5.7.26", "smtp; 550 5.7.26 DMARC", "policy"),
        ("failed", "5.1.7", "smtp; 553 5.1.7 bad sender", "policy"),
        ("bogus", "5.1.1", "smtp; 550 5.1.1", "unknown"),
    ],
)
def test_dsn_actions(action: str, status: str, diagnostic: str, verdict: str) -> None:
    report = parse_report(reports.dsn(action=action, status=status, diagnostic=diagnostic))
    assert report.verdict == verdict


def test_arf_complaints() -> None:
    report = parse_report(reports.arf(herald_key=KEY))
    assert report.verdict == "complaint"
    assert report.herald_key == KEY
    assert report.recipient == "alice@example.org"
    assert parse_report(reports.arf(feedback_type="fraud")).verdict == "complaint"
    assert parse_report(reports.arf(feedback_type="some-new-type")).verdict == "complaint"
    assert parse_report(reports.arf(feedback_type="not-spam")).verdict == "none"
    assert parse_report(reports.arf(feedback_type="auth-failure")).verdict == "policy"


def test_plain_bounces_only_from_mail_systems() -> None:
    assert parse_report(reports.plain_bounce()).verdict == "hard"
    assert parse_report(reports.plain_bounce("452 4.2.2 over quota")).verdict == "soft"
    # An out-of-office reply quoting a code is no bounce.
    human = reports.plain_bounce(sender="alice")
    assert parse_report(human).verdict == "unknown"
    assert parse_report(human, null_sender=True).verdict == "hard"


def test_report_text_is_printable_and_bounded() -> None:
    nasty = "smtp; 550 5.1.1 \x1b[31mred\x00\u2028" + "x" * 5000
    report = parse_report(reports.dsn(diagnostic=nasty))
    assert report.verdict == "hard"
    assert "\x1b" not in report.detail
    assert "\x00" not in report.detail
    assert len(report.detail) <= 500


# ------------------------------------------------------------------ hostile input, never raises

_fuzz = settings(
    max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@_fuzz
@given(st.binary(max_size=4000))
def test_garbage_never_raises(raw: bytes) -> None:
    assert parse_report(raw).verdict in VERDICTS
    assert parse_report(raw, null_sender=True).verdict in VERDICTS


_header_text = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=200
)


@_fuzz
@given(
    action=_header_text,
    status=_header_text,
    diagnostic=_header_text,
    key=_header_text,
)
def test_hostile_dsn_fields_never_raise(action, status, diagnostic, key) -> None:
    raw = (
        reports.dsn()
        .replace(b"Action: failed", b"Action: " + action.encode("utf-8", "replace"))
        .replace(b"Status: 5.1.1", b"Status: " + status.encode("utf-8", "replace"))
        .replace(b"Diagnostic-Code: smtp; 550", b"Diagnostic-Code: " + diagnostic.encode())
        .replace(b"Subject: Hello", b"X-Herald-Key: " + key.encode())
    )
    report = parse_report(raw)
    assert report.verdict in VERDICTS
    assert report.herald_key is None or len(report.herald_key) == 64


@_fuzz
@given(feedback=_header_text, cut=st.integers(min_value=0, max_value=2000))
def test_hostile_or_truncated_arf_never_raises(feedback, cut) -> None:
    raw = reports.arf(feedback_type=feedback.replace("\r", "").replace("\n", ""))[:cut]
    assert parse_report(raw).verdict in VERDICTS


def test_deeply_nested_mime_is_unknown_not_a_crash() -> None:
    layers = 3000
    head = b"".join(
        b'Content-Type: multipart/mixed; boundary="b%d"\r\n\r\n--b%d\r\n' % (n, n)
        for n in range(layers)
    )
    assert parse_report(head + b"x\r\n").verdict in VERDICTS


# ------------------------------------------------------------------ provider payloads (pure)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=20), children, max_size=5)
    ),
    max_leaves=30,
)


@_fuzz
@given(json_values)
def test_provider_mappers_never_raise(payload) -> None:
    for events in (
        ses_events("m-1", payload),
        sendgrid_events(payload),
        mailgun_events(payload),
        postmark_events(payload),
        sendgrid_events([payload]),
        mailgun_events({"event-data": payload}),
    ):
        assert all(e.verdict in VERDICTS for e in events)


def test_ses_mapping() -> None:
    note = {
        "notificationType": "Bounce",
        "bounce": {
            "bounceType": "Permanent",
            "bounceSubType": "General",
            "bouncedRecipients": [
                {"emailAddress": "a@example.org", "status": "5.1.1", "diagnosticCode": "smtp; 550"},
                {"emailAddress": "b@example.org", "status": "5.7.1", "diagnosticCode": "spam"},
            ],
        },
        "mail": {"headers": [{"name": "X-Herald-Key", "value": KEY}]},
    }
    hard, blocked = ses_events("msg-1", note)
    assert (hard.verdict, hard.address, hard.herald_key) == ("hard", "a@example.org", KEY)
    assert blocked.verdict == "policy"  # "Permanent" with 5.7.1 is about us, not b
    assert {hard.event_ref, blocked.event_ref} == {"ses:msg-1:0", "ses:msg-1:1"}
    note["bounce"]["bounceType"] = "Transient"  # type: ignore[index]
    assert ses_events("msg-2", note)[0].verdict == "soft"
    complaint = {
        "notificationType": "Complaint",
        "complaint": {"complainedRecipients": [{"emailAddress": "c@example.org"}]},
    }
    assert [e.verdict for e in ses_events("msg-3", complaint)] == ["complaint"]


def test_sendgrid_mailgun_postmark_mapping() -> None:
    sg = [
        {"event": "bounce", "type": "bounce", "email": "a@x.example", "sg_event_id": "e1"},
        {"event": "bounce", "type": "blocked", "email": "b@x.example", "sg_event_id": "e2"},
        {"event": "spamreport", "email": "c@x.example", "sg_event_id": "e3"},
        {"event": "group_unsubscribe", "email": "d@x.example", "sg_event_id": "e4"},
        {"event": "open", "email": "e@x.example", "sg_event_id": "e5"},
        {"event": "bounce", "email": "no-id@x.example"},
    ]
    assert [(e.verdict, e.event_ref) for e in sendgrid_events(sg)] == [
        ("hard", "sendgrid:e1"),
        ("soft", "sendgrid:e2"),
        ("complaint", "sendgrid:e3"),
        ("unsubscribe", "sendgrid:e4"),
    ]
    mg = {
        "event-data": {
            "id": "m1",
            "event": "failed",
            "severity": "permanent",
            "recipient": "a@x.example",
        }
    }
    assert [e.verdict for e in mailgun_events(mg)] == ["hard"]
    mg["event-data"]["severity"] = "temporary"
    assert [e.verdict for e in mailgun_events(mg)] == ["soft"]
    pm = {"RecordType": "Bounce", "ID": 42, "Type": "HardBounce", "Email": "a@x.example"}
    assert [(e.verdict, e.event_ref) for e in postmark_events(pm)] == [
        ("hard", "postmark:Bounce:42")
    ]
    change = {
        "RecordType": "SubscriptionChange",
        "MessageID": "pm-1",
        "Recipient": "z@x.example",
        "SuppressSending": True,
        "SuppressionReason": "ManualSuppression",
        "ChangedAt": "2026-12-03T04:00:00Z",
    }
    assert [e.verdict for e in postmark_events(change)] == ["unsubscribe"]
    assert postmark_events(json.loads('{"RecordType": "Delivery"}')) == []
