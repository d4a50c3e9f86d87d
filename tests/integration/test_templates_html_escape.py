"""One decision makes a template HTML: autoescaped and sent as the HTML part (issue 7, item 5)."""

from __future__ import annotations

import csv
import email
import email.policy
from pathlib import Path

import pytest
from typer.testing import CliRunner

from herald.cli import app
from templates.mime import build_message
from templates.render import StepTemplate, is_html_template
from tests.support.smtp_server import LedgerSMTPServer

PAYLOAD = "<img src=x onerror=alert(1)>"
ESCAPED = "&lt;img src=x onerror=alert(1)&gt;"
VARIANTS = ["welcome.html", "welcome.HTML", "welcome.Htm", "welcome.hTmL", "welcome.XHTML"]


@pytest.mark.parametrize("file_name", VARIANTS)
def test_a_recipient_name_is_escaped_in_the_html_part_whatever_the_suffix_case(
    tmp_path: Path, file_name: str
) -> None:
    (tmp_path / file_name).write_text("<p>Hi {{ name }}</p>")
    (tmp_path / "part.HTML").write_text("<b>{{ name }}</b>")
    (tmp_path / "outer.html").write_text("{% include 'part.HTML' %}")
    step = StepTemplate.compile(base_dir=tmp_path, subject="Hi {{ name }}", template=file_name)
    content = step.render({"name": PAYLOAD})

    assert content.html == f"<p>Hi {ESCAPED}</p>"
    raw = build_message(
        sender="news@news.example.com",
        sender_name=None,
        recipient="ada@example.org",
        recipient_name=None,
        reply_to=None,
        content=content,
        message_id="<abc@news.example.com>",
        key="k" * 64,
    )
    message = email.message_from_bytes(raw, policy=email.policy.default)
    html_part = message.get_body(preferencelist=("html",))
    assert html_part is not None
    html = html_part.get_content()
    assert ESCAPED in html
    assert PAYLOAD not in html
    included = StepTemplate.compile(base_dir=tmp_path, subject="s", template="outer.html")
    assert included.render({"name": PAYLOAD}).html == f"<b>{ESCAPED}</b>"


@pytest.mark.parametrize(
    ("name", "expected"),
    [("a.html", True), ("a.HTM", True), ("dir/a.XhTmL", True), ("<inline html>", True),
     ("a.txt", False), ("a.TEXT", False), ("<inline text>", False), ("<inline subject>", False),
     ("a.html.txt", False), ("<inline body.html>", False), (None, False)],
)  # fmt: skip
def test_is_html_template(name: str | None, expected: bool) -> None:
    assert is_html_template(name) is expected


# --- through the CLI and a real SMTP server ------------------------------------------------

CAMPAIGN = """\
name: escape
from: "Herald Tests <news@herald.test>"
audience: people.csv
steps:
  - id: welcome
    subject: "Hello"
    template: {template}
"""


@pytest.mark.parametrize("file_name", ["welcome.HTML", "welcome.Htm"])
def test_an_upper_case_suffix_is_escaped_on_the_wire(
    tmp_path: Path, db_url: str, smtp_server: LedgerSMTPServer, file_name: str
) -> None:
    folder = tmp_path / "c"
    folder.mkdir()
    with (folder / "people.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerows([["email", "name"], ["ada@example.org", PAYLOAD]])
    (folder / file_name).write_text("<p>Hi {{ name }}</p>")
    path = folder / "campaign.yaml"
    path.write_text(CAMPAIGN.format(template=file_name))
    runner = CliRunner()

    launched = runner.invoke(app, ["launch", str(path), "--database-url", db_url])
    assert launched.exit_code == 0, launched.output
    worked = runner.invoke(
        app,
        [
            "worker", "--until-idle", "--database-url", db_url,
            "--smtp-url", f"smtp://{smtp_server.host}:{smtp_server.port}",
            "--poll", "0.05", "--retry-base", "0.01", "--idle-horizon", "0",
        ],
    )  # fmt: skip
    assert worked.exit_code == 0, worked.output

    (raw,) = smtp_server.messages()
    message = email.message_from_bytes(raw, policy=email.policy.default)
    html_part = message.get_body(preferencelist=("html",))
    assert html_part is not None
    assert html_part.get_content_type() == "text/html"
    html = html_part.get_content()
    assert ESCAPED in html
    assert PAYLOAD not in html


def test_escaping_follows_the_part_not_the_file_name(tmp_path: Path) -> None:
    """A .txt partial included from the HTML body escapes like the rest of the HTML; an .html
    partial included from the text body does not (text is not HTML)."""
    (tmp_path / "name.txt").write_text("{{ name }}")
    (tmp_path / "card.html").write_text("<b>{{ name }}</b>")
    (tmp_path / "body.html").write_text("<p>{% include 'name.txt' %}</p>")
    (tmp_path / "body.txt").write_text("{% include 'card.html' %}")
    html = StepTemplate.compile(base_dir=tmp_path, subject="{{ name }}", template="body.html")
    content = html.render({"name": PAYLOAD})
    assert content.html == f"<p>{ESCAPED}</p>"
    assert content.subject == PAYLOAD  # a header: encoded by the MIME builder, never escaped
    text = StepTemplate.compile(base_dir=tmp_path, subject="s", template="body.txt")
    assert text.render({"name": PAYLOAD}).text == f"<b>{PAYLOAD}</b>"
