"""The pieces of the webhook channel: headers and ${ENV}, the JSON body, outcomes, validate."""

from __future__ import annotations

import asyncio
import json
import re
import socket
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from campaigns.audience import Recipient, iter_audience
from campaigns.spec import load_campaign
from dispatch.egress import EgressPolicy
from dispatch.request_headers import (
    HeaderError,
    MissingVariable,
    check_header,
    resolve_headers,
    secret_header_names,
    variables_in,
)
from dispatch.transport import Envelope, Outcome, Verdict
from dispatch.webhook import (
    WebhookRequest,
    WebhookTransport,
    outcome_for_status,
    retry_after_seconds,
)
from scheduler.check import check_campaign
from scheduler.compose import compile_steps, compose_job
from templates.errors import TemplateError
from templates.json_body import JsonBodyTemplate

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


# --- ${ENV} references -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "names"),
    [
        ("Bearer ${CRM_TOKEN}", ["CRM_TOKEN"]),
        ("${A}-${_b2}", ["A", "_b2"]),
        ("costs $5, $$ and $X", []),
        ("no references", []),
    ],
)
def test_variables_in(value: str, names: list[str]) -> None:
    assert variables_in(value) == names


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("${}", "invalid environment variable reference ${}"),
        ("${9X}", "invalid environment variable reference ${9X}"),
        ("${A-B}", "invalid environment variable reference ${A-B}"),
        ("Bearer ${HERALD_SECRET_TOKEN", "unclosed ${"),
    ],
)
def test_bad_references_are_refused(value: str, error: str) -> None:
    with pytest.raises(HeaderError, match=error.replace("$", r"\$").replace("{", r"\{")):
        variables_in(value)


def test_resolution_happens_late_and_names_no_secret() -> None:
    headers = {"Authorization": "Bearer ${HERALD_SECRET_TOKEN}", "X-Price": "$$${AMOUNT}"}
    listed = {"HERALD_SECRET_VARS": "OTHER, AMOUNT"}  # the explicit list, besides the prefix
    resolved = resolve_headers(headers, {"HERALD_SECRET_TOKEN": "t0k", "AMOUNT": "5", **listed})
    assert resolved == {"Authorization": "Bearer t0k", "X-Price": "$5"}
    with pytest.raises(
        MissingVariable, match="environment variable HERALD_SECRET_TOKEN is not set"
    ):
        resolve_headers(headers, {"AMOUNT": "5", **listed})
    with pytest.raises(HeaderError) as caught:
        resolve_headers(
            headers, {"HERALD_SECRET_TOKEN": "evil\r\nX-Injected: 1", "AMOUNT": "5", **listed}
        )
    assert "evil" not in str(caught.value)
    assert secret_header_names(headers) == {"authorization", "x-price"}


@given(secret=st.text(max_size=40))
@example(secret="caf\u00e9")
@example(secret="a\x7fb")
def test_a_resolved_value_is_refused_unless_the_http_client_can_send_it(secret: str) -> None:
    """Whatever the environment holds, resolution either refuses it (naming only the header)
    or yields a value the HTTP client writes unchanged, as one line."""
    headers = {"Authorization": "Bearer ${HERALD_SECRET_TOKEN}"}
    try:
        resolved = resolve_headers(headers, {"HERALD_SECRET_TOKEN": secret})
    except HeaderError as exc:
        assert "Authorization" in str(exc)
        assert len(secret) < 4 or secret not in str(exc)
        return
    raw = httpx.Headers(resolved).raw
    assert raw == [(b"Authorization", f"Bearer {secret}".encode("ascii"))]
    assert not any(byte < 0x20 and byte != 0x09 for byte in raw[0][1])


@pytest.mark.parametrize("name", ["Host", "content-length", "Idempotency-Key", "Connection"])
def test_reserved_headers_are_refused(name: str) -> None:
    with pytest.raises(HeaderError, match="is set by Herald"):
        check_header(name, "x")


# --- the JSON body ---------------------------------------------------------------------------


def test_recipient_data_cannot_inject_json(tmp_path: Path) -> None:
    body = JsonBodyTemplate.compile(
        {"user": {"name": "{{ name }}", "note": "Hi {{ name }}!"}, "admin": False},
        base_dir=tmp_path,
    )
    hostile = '", "admin": true, "x": "'
    rendered = json.loads(body.render({"name": hostile}))
    assert rendered == {"user": {"name": hostile, "note": f"Hi {hostile}!"}, "admin": False}


def test_body_templates_are_sandboxed_and_strict(tmp_path: Path) -> None:
    body = JsonBodyTemplate.compile({"a": ["{{ missing }}"]}, base_dir=tmp_path)
    with pytest.raises(TemplateError, match=r"undefined variable 'missing' in body\.a\[0\]"):
        body.render({})
    unsafe = JsonBodyTemplate.compile({"a": "{{ ''.__class__ }}"}, base_dir=tmp_path)
    with pytest.raises(TemplateError, match="unsafe"):
        unsafe.render({})
    with pytest.raises(TemplateError, match=r"syntax error in body\.b"):
        JsonBodyTemplate.compile({"b": "{% if %}"}, base_dir=tmp_path)


# --- outcomes --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "verdict"),
    [
        (200, Verdict.SENT),
        (202, Verdict.SENT),
        (204, Verdict.SENT),
        (408, Verdict.RETRY),
        (429, Verdict.RETRY),
        (500, Verdict.RETRY),
        (503, Verdict.RETRY),
        (400, Verdict.FAILED),
        (401, Verdict.FAILED),
        (404, Verdict.FAILED),
        (409, Verdict.FAILED),
        (304, Verdict.FAILED),
    ],
)
def test_status_decides_the_verdict(status: int, verdict: Verdict) -> None:
    outcome = outcome_for_status(status, {}, "")
    assert (outcome.verdict, outcome.code) == (verdict, status)


def test_retry_after_forms() -> None:
    assert retry_after_seconds("120", now=NOW) == 120.0
    assert retry_after_seconds("Sun, 01 Mar 2026 12:05:00 GMT", now=NOW) == 300.0
    assert retry_after_seconds("Sun, 01 Mar 2026 11:00:00 GMT", now=NOW) == 0.0  # past
    assert retry_after_seconds("soon", now=NOW) is None
    assert retry_after_seconds(None) is None
    outcome = outcome_for_status(429, {"retry-after": "7"}, "slow down")
    assert (outcome.retry_after, outcome.text) == (7.0, "HTTP 429 Too Many Requests: slow down")


def test_payload_round_trip_and_corrupt_payloads() -> None:
    request = WebhookRequest(
        url="https://h.example/in", method="PATCH", body='{"a":1}', headers={"X": "${Y}"}
    )
    assert WebhookRequest.from_payload(request.to_payload()) == request
    for bad, reason in (
        (b"[]", "not a JSON object"),
        (b'{"url": "u", "method": "GET", "body": ""}', "needs url, method"),
        (b"\xff", "can't decode"),  # UnicodeDecodeError is a ValueError
    ):
        with pytest.raises(ValueError, match=re.escape(reason)):
            WebhookRequest.from_payload(bad)


def envelope(payload: bytes) -> Envelope:
    return Envelope(1, "k" * 64, "webhook", "news@acme.example", "a@example.com", "<m>", payload)


def prepare(transport: WebhookTransport, payload: bytes) -> Any:
    async def go() -> Any:
        try:
            return await transport.prepare(envelope(payload))
        finally:
            await transport.aclose()

    return asyncio.run(go())


def test_prepare_outcomes_before_anything_is_sent() -> None:
    policy = EgressPolicy.from_env(
        {"HERALD_EGRESS_ALLOW": "127.0.0.1/32", "HERALD_EGRESS_ALLOW_HTTP": "1"}
    )
    local = WebhookRequest(
        url="http://127.0.0.1/hook",
        method="POST",
        body="{}",
        headers={"A": "${HERALD_SECRET_TOKEN}"},
    )
    missing = prepare(WebhookTransport(policy, environ={}), local.to_payload())
    assert isinstance(missing, Outcome)
    assert missing.verdict is Verdict.RETRY
    assert "environment variable HERALD_SECRET_TOKEN is not set" in missing.text
    metadata = WebhookRequest(url="http://169.254.169.254/latest", method="POST", body="{}")
    denied = prepare(WebhookTransport(policy, environ={}), metadata.to_payload())
    assert isinstance(denied, Outcome)
    assert denied.verdict is Verdict.FAILED
    assert "cloud metadata (169.254.169.254: AWS/GCP/Azure)" in denied.text
    corrupt = prepare(WebhookTransport(policy, environ={}), b"not json")
    assert isinstance(corrupt, Outcome)
    assert corrupt.verdict is Verdict.FAILED


# --- compose and validate --------------------------------------------------------------------


CAMPAIGN = """\
name: hooks
from: news@acme.example
audience:
  - {{email: ann@example.com, plan: gold}}
  - {{email: bob@example.com}}
steps:
  - id: crm
    channel: webhook
    url: "{url}"
    headers: {{Authorization: "Bearer ${{HERALD_SECRET_TOKEN}}"}}
    body: {{email: "{{{{ email }}}}", plan: "{{{{ plan }}}}"}}
    in_doubt: resend
"""


@pytest.fixture
def no_dns(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"DNS lookup: {args}")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)


def test_compose_stores_the_rendered_body_and_unresolved_headers(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(CAMPAIGN.format(url="https://hooks.example.com/in"), encoding="utf-8")
    loaded = load_campaign(path)
    (step,) = compile_steps(loaded)
    ann = next(iter_audience(loaded))
    assert isinstance(ann, Recipient)
    job = compose_job(loaded, step, ann, NOW)
    assert (job.channel, job.in_doubt_policy, job.recipient) == ("webhook", "resend", ann.email)
    assert job.sender == "news@acme.example"
    request = WebhookRequest.from_payload(job.payload)
    assert request.headers == {"Authorization": "Bearer ${HERALD_SECRET_TOKEN}"}
    assert json.loads(request.body) == {"email": "ann@example.com", "plan": "gold"}
    assert (request.url, request.method) == ("https://hooks.example.com/in", "POST")


def test_validate_renders_every_body_and_checks_the_url_without_dns(
    tmp_path: Path, no_dns: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(CAMPAIGN.format(url="https://hooks.example.com/in"), encoding="utf-8")
    report = check_campaign(load_campaign(path), NOW, environ={})
    assert [(p.where, p.step, p.error) for p in report.problems] == [
        ("line 5 (bob@example.com)", "crm", "undefined variable 'plan' in body.plan (line 1)")
    ]
    assert report.messages == 1

    path.write_text(CAMPAIGN.format(url="http://10.1.2.3/in"), encoding="utf-8")
    report = check_campaign(load_campaign(path), NOW, environ={})
    assert report.problems[0].where == "step crm"
    assert "scheme not allowed (http)" in report.problems[0].error
    report = check_campaign(load_campaign(path), NOW, environ={"HERALD_EGRESS_ALLOW_HTTP": "1"})
    assert "private (10.0.0.0/8)" in report.problems[0].error
    report = check_campaign(
        load_campaign(path),
        NOW,
        environ={"HERALD_EGRESS_ALLOW_HTTP": "1", "HERALD_EGRESS_ALLOW": "10.0.0.0/8"},
    )
    assert [p.step for p in report.problems] == ["crm"]  # only bob's missing plan is left
