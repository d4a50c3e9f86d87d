"""Campaign-file keys for webhook steps and URL audiences: parsing and errors with line/field."""

from __future__ import annotations

import socket
import textwrap
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from campaigns.errors import CampaignError, SpecError
from campaigns.spec import StepSpec, UrlAudience, WebhookStepSpec, load_campaign

HEADER = "name: c1\nfrom: news@acme.example\n"
INLINE = "audience: [ann@example.com]\n"
EMAIL_STEP = "  - {id: mail, subject: Hi, text: hello}\n"


@pytest.fixture(autouse=True)
def no_dns(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loading a campaign never resolves a name."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"DNS lookup during load: {args}")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)


def write(folder: Path, text: str) -> Path:
    path = folder / "campaign.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def webhook(**fields: str) -> str:
    """A webhook step, each field given as YAML text; defaults make it valid."""
    values = {
        "id": "hook",
        "channel": "webhook",
        "url": "https://hooks.example.com/in",
        "body": "{email: '{{ email }}'}",
        **fields,
    }
    lines = [f"    {key}: {value}" for key, value in values.items() if value != "-"]
    return "  - " + "\n".join(lines)[4:] + "\n"


def campaign(steps: str, audience: str = INLINE) -> str:
    return HEADER + audience + "steps:\n" + steps


def problem_of(folder: Path, text: str) -> CampaignError:
    with pytest.raises(SpecError) as caught:
        load_campaign(write(folder, text))
    error = caught.value
    if error.problems:
        assert len(error.problems) == 1, [str(p) for p in error.problems]
        return error.problems[0]
    return error


# --- webhook steps -------------------------------------------------------------------------


def test_webhook_step_is_parsed(tmp_path: Path) -> None:
    text = campaign(
        EMAIL_STEP
        + textwrap.indent(
            textwrap.dedent(
                """\
              - id: crm
                channel: webhook
                after: 1h
                url: https://hooks.example.com/in?src=herald
                method: put
                headers:
                  Authorization: "Bearer ${CRM_TOKEN}"
                  X-Price: "$$5 ${CURRENCY}"
                body:
                  user: {email: "{{ email }}", tags: [a, 1, true, null, 2.5]}
                in_doubt: resend
            """
            ),
            "  ",
        )
    )
    spec = load_campaign(write(tmp_path, text)).spec
    mail, crm = spec.steps
    assert isinstance(mail, StepSpec)
    assert mail.in_doubt == "hold"
    assert isinstance(crm, WebhookStepSpec)
    assert (crm.channel, crm.method, crm.in_doubt, crm.after) == (
        "webhook",
        "PUT",
        "resend",
        timedelta(hours=1),
    )
    assert crm.headers == {"Authorization": "Bearer ${CRM_TOKEN}", "X-Price": "$$5 ${CURRENCY}"}
    assert crm.body == {"user": {"email": "{{ email }}", "tags": ["a", 1, True, None, 2.5]}}


def test_webhook_defaults(tmp_path: Path) -> None:
    (step,) = load_campaign(write(tmp_path, campaign(webhook()))).spec.steps
    assert isinstance(step, WebhookStepSpec)
    assert (step.method, step.headers, step.in_doubt) == ("POST", {}, "hold")


@pytest.mark.parametrize(
    ("fields", "field", "message", "hint"),
    [
        (
            {"url": "ftp://hooks.example.com/in"},
            "steps[0].url",
            "invalid url 'ftp://hooks.example.com/in': scheme not allowed (ftp)",
            "use an https:// URL",
        ),
        (
            {"url": "https://user:pw@hooks.example.com/in"},
            "steps[0].url",
            "userinfo not allowed",
            "put credentials in headers",
        ),
        ({"url": "https://0x7f.1/in"}, "steps[0].url", "non-canonical numeric host", None),
        (
            {"method": "GET"},
            "steps[0].method",
            "method must be POST, PUT or PATCH, got 'GET'",
            None,
        ),
        ({"bdy": "{a: b}"}, "steps[0]", "unknown key 'bdy'", "did you mean 'body'?"),
        ({"body": "-"}, "steps[0]", "missing required key 'body'", None),
        ({"url": "-"}, "steps[0]", "missing required key 'url'", None),
        ({"body": "hello"}, "steps[0].body", "body must be a mapping or a list", None),
        ({"body": "{when: 2024-01-02}"}, "steps[0].body", "body.when: the date 2024-01-02", None),
        ({"body": "{1: x}"}, "steps[0].body", "body: keys must be text", None),
        (
            {"in_doubt": "maybe"},
            "steps[0].in_doubt",
            "must be 'hold' or 'resend', got 'maybe'",
            None,
        ),
        (
            {"headers": "{Authorization: 'Bearer ${CRM TOKEN}'}"},
            "steps[0].headers",
            "invalid environment variable reference ${CRM TOKEN}",
            "${NAME}",
        ),
        (
            {"headers": "{Authorization: 'Bearer ${1TOKEN}'}"},
            "steps[0].headers",
            "invalid environment variable reference ${1TOKEN}",
            None,
        ),
        (
            {"headers": "{Authorization: 'Bearer ${TOKEN'}"},
            "steps[0].headers",
            "unclosed ${ in header value",
            None,
        ),
        (
            {"headers": "{Idempotency-Key: abc}"},
            "steps[0].headers",
            "header 'Idempotency-Key' is set by Herald",
            None,
        ),
        (
            {"headers": '{X-A: "one\\ntwo"}'},
            "steps[0].headers",
            "the value of header 'X-A' contains a line break or NUL",
            None,
        ),
        (
            {"headers": '{X-A: "caf\u00e9"}'},
            "steps[0].headers",
            "the value of header 'X-A' contains a non-ASCII character",
            None,
        ),
        (
            {"headers": '{X-A: "a\\x07b"}'},
            "steps[0].headers",
            "the value of header 'X-A' contains a control character",
            None,
        ),
        ({"headers": "{'Bad Name': x}"}, "steps[0].headers", "invalid header name", None),
        (
            {"headers": "{X-A: a, x-a: b}"},
            "steps[0].headers",
            "header 'x-a' is given twice (also as 'X-A')",
            None,
        ),
        (
            {"channel": "sms"},
            "steps[0].channel",
            "must be 'email' or 'webhook', got 'sms'",
            None,
        ),
    ],
    ids=lambda value: value if isinstance(value, str) and len(value) < 30 else None,
)
def test_webhook_step_errors_name_the_field(
    tmp_path: Path, fields: dict[str, str], field: str, message: str, hint: str | None
) -> None:
    problem = problem_of(tmp_path, campaign(webhook(**fields)))
    assert problem.field == field, str(problem)
    assert message in problem.message, str(problem)
    if hint is not None:
        assert problem.hint is not None, str(problem)
        assert hint in problem.hint, str(problem)
    assert problem.line is not None
    assert problem.line >= 4


def test_email_steps_refuse_in_doubt_resend(tmp_path: Path) -> None:
    text = campaign("  - {id: mail, subject: Hi, text: hello, in_doubt: resend}\n")
    problem = problem_of(tmp_path, text)
    assert (problem.line, problem.field) == (5, "steps[0].in_doubt")
    assert "email is never resent automatically" in problem.message
    assert problem.hint is not None
    assert "herald in-doubt resolve" in problem.hint


def test_email_step_unknown_key_suggests_email_keys(tmp_path: Path) -> None:
    problem = problem_of(tmp_path, campaign("  - {id: mail, subject: Hi, txt: hello}\n"))
    assert problem.message == "unknown key 'txt'"
    assert problem.hint == "did you mean 'text'?"


# --- URL audiences -------------------------------------------------------------------------


def test_url_audience_is_parsed_and_hashed_without_fetching(tmp_path: Path) -> None:
    audience = (
        "audience:\n"
        "  url: https://crm.example.com/export\n"
        "  format: ndjson\n"
        '  headers: {Authorization: "Bearer ${CRM_TOKEN}"}\n'
        "  strict: false\n"
    )
    loaded = load_campaign(write(tmp_path, campaign(EMAIL_STEP, audience)))
    assert loaded.spec.audience == UrlAudience(
        url="https://crm.example.com/export",
        format="ndjson",
        headers={"Authorization": "Bearer ${CRM_TOKEN}"},
        strict=False,
    )
    # The hash covers the YAML (and templates), not the remote list: same file, same hash.
    again = load_campaign(write(tmp_path, campaign(EMAIL_STEP, audience)))
    assert again.spec_hash == loaded.spec_hash


def test_url_audience_defaults(tmp_path: Path) -> None:
    text = campaign(EMAIL_STEP, "audience: {url: 'https://crm.example.com/list.csv'}\n")
    audience = load_campaign(write(tmp_path, text)).spec.audience
    assert isinstance(audience, UrlAudience)
    assert (audience.format, audience.headers, audience.strict) == (None, {}, True)


@pytest.mark.parametrize(
    ("audience", "field", "message", "hint"),
    [
        (
            "{url: 'file:///etc/passwd'}",
            "audience.url",
            "scheme not allowed (file)",
            None,
        ),
        (
            "{url: 'https://crm.example.com/x', format: xml}",
            "audience.format",
            "must be 'csv', 'json' or 'ndjson', got 'xml'",
            None,
        ),
        (
            "{url: 'https://crm.example.com/x', formt: csv}",
            "audience",
            "unknown key 'formt'",
            "did you mean 'format'?",
        ),
        (
            "{url: 'https://crm.example.com/x', strict: 'no'}",
            "audience.strict",
            "expected true or false, got 'no'",
            None,
        ),
        (
            "{url: 'https://crm.example.com/x', headers: {X-Key: '${}'}}",
            "audience.headers",
            "invalid environment variable reference ${}",
            None,
        ),
    ],
    ids=["scheme", "format", "unknown-key", "strict", "env-ref"],
)
def test_url_audience_errors_name_the_field(
    tmp_path: Path, audience: str, field: str, message: str, hint: str | None
) -> None:
    problem = problem_of(tmp_path, campaign(EMAIL_STEP, f"audience: {audience}\n"))
    assert (problem.line, problem.field) == (3, field), str(problem)
    assert message in problem.message, str(problem)
    if hint is not None:
        assert problem.hint == hint
