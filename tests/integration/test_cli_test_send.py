"""``herald test-send``: each email step once to the given address through a real SMTP server,
outside the campaign (nothing in the outbox, keys and Message-IDs of its own), with one clear
line when the relay cannot be reached."""

from __future__ import annotations

import email
import email.policy
import socket
import tempfile
from datetime import UTC, datetime
from email.message import EmailMessage
from pathlib import Path

import sqlalchemy as sa
from hypothesis import event, given, settings
from hypothesis import strategies as st
from sqlalchemy.engine import Engine

from campaigns.addresses import normalise_address
from herald.app.launch import load
from herald.app.test_send import compose_tests
from herald.errors import UsageError
from tests.support.campaign_files import write_campaign
from tests.support.examples import examples
from tests.support.factories import invoke, launch_json
from tests.support.smtp_server import LedgerSMTPServer, read_ledger_entries

ME = "me@tester.example"


def _url(server: LedgerSMTPServer) -> str:
    return f"smtp://{server.host}:{server.port}"


def _parsed(raw: bytes) -> EmailMessage:
    message = email.message_from_bytes(raw, policy=email.policy.default)
    assert isinstance(message, EmailMessage)
    return message


def _outbox(engine: Engine) -> list[tuple[str, str, str]]:
    with engine.connect() as conn:
        rows = conn.execute(sa.text("select key, state, message_id from send_job order by key"))
        return [(r.key, r.state, r.message_id) for r in rows]


def test_each_step_reaches_the_address_once_and_the_outbox_is_untouched(
    db_url: str, engine: Engine, tmp_path: Path, smtp_server: LedgerSMTPServer
) -> None:
    path, _ = write_campaign(tmp_path, recipients=3)
    launch_json(db_url, path)
    before = _outbox(engine)
    result = invoke("test-send", str(path), "--to", ME, "--smtp-url", _url(smtp_server))
    assert result.exit_code == 0, result.output
    assert _outbox(engine) == before  # the campaign's jobs: same keys, same states
    entries = read_ledger_entries(smtp_server.ledger_path)
    assert [entry.rcpt for entry in entries] == [ME, ME, ME]
    messages = [_parsed(raw) for raw in smtp_server.messages()]
    assert [m["Subject"] for m in messages] == ["Welcome User 0", "Tips for City0", "Later, User 0"]
    campaign_ids = {message_id for _, _, message_id in before}
    campaign_keys = {key for key, _, _ in before}
    for message in messages:
        assert message["To"] == f"User 0 <{ME}>"
        assert message["X-Herald-Test-Send"] == "yes"
        assert message["Date"]  # stamped at sending, as the worker does
        assert message["Message-ID"] not in campaign_ids
        assert message["X-Herald-Key"] not in campaign_keys
    assert "Tip for me@tester.example" in messages[1].get_content()
    assert result.stdout.count("sent: step ") == 3
    assert "line 2 (user00000@example.com)" in result.stderr


def test_a_second_test_send_has_new_message_ids_and_step_picks_one(
    tmp_path: Path, smtp_server: LedgerSMTPServer
) -> None:
    path, addresses = write_campaign(tmp_path, recipients=2)
    url = _url(smtp_server)
    first = invoke("test-send", str(path), "--to", ME, "--step", "tips", "--smtp-url", url)
    second = invoke(
        "test-send", str(path), "--to", ME, "--step", "tips", "--recipient", addresses[1],
        "--smtp-url", url, "--json",
    )  # fmt: skip
    assert first.exit_code == 0, first.output
    assert second.exit_code == 0, second.output
    ids = smtp_server.accepted_ids()
    assert len(ids) == 2
    assert len(set(ids)) == 2  # a provider collapsing repeated Message-IDs still shows both
    subjects = [_parsed(raw)["Subject"] for raw in smtp_server.messages()]
    assert subjects == ["Tips for City0", "Tips for City1"]
    assert '"step": "tips"' in second.stdout


def test_unreachable_relay_is_one_line_and_exit_1(tmp_path: Path) -> None:
    path, _ = write_campaign(tmp_path, recipients=1)
    with socket.socket() as probe:  # a port nothing listens on (bound, never listening)
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        result = invoke(
            "test-send", str(path), "--to", ME, "--smtp-url", f"smtp://127.0.0.1:{port}"
        )
    assert result.exit_code == 1, result.output
    lines = result.stderr.splitlines()
    assert lines[0] == (
        f"error: test-send: relay unreachable: connection refused (smtp://127.0.0.1:{port})"
        " (step welcome not sent)"
    )
    assert lines[1].startswith("  hint: ")
    assert len(lines) == 2
    assert result.stdout == ""


def test_hostile_input_is_refused_before_anything_is_sent(
    tmp_path: Path, smtp_server: LedgerSMTPServer
) -> None:
    path, _ = write_campaign(tmp_path, recipients=1)
    url = _url(smtp_server)
    for hostile in (f"{ME}\r\nBcc: victim@evil.example", f"[bold]{ME}", "<script>@x"):
        result = invoke("test-send", str(path), "--to", hostile, "--smtp-url", url)
        assert result.exit_code == 2, result.output
        assert result.stderr.startswith("error: --to ")
        assert "\nBcc" not in result.stderr
    result = invoke("test-send", str(path), "--to", ME, "--step", "nope", "--smtp-url", url)
    assert result.exit_code == 2
    assert "has no step 'nope'" in result.stderr
    result = invoke(
        "test-send", str(path), "--to", ME, "--recipient", "x@nowhere.example", "--smtp-url", url
    )
    assert result.exit_code == 2
    assert "not in the audience" in result.stderr
    assert smtp_server.messages() == []


WITH_WEBHOOK = """\
name: mixed
from: "Herald Tests <news@herald.test>"
audience: people.csv
steps:
  - id: mail
    subject: "Hello {{ name }}"
    text: "Hi"
  - id: hook
    channel: webhook
    url: https://hooks.example.com/in
    body: {email: "{{ email }}"}
"""


def test_webhook_steps_are_skipped_and_said_so(
    tmp_path: Path, smtp_server: LedgerSMTPServer
) -> None:
    path, _ = write_campaign(tmp_path, recipients=1)
    path.write_text(WITH_WEBHOOK)
    url = _url(smtp_server)
    result = invoke("test-send", str(path), "--to", ME, "--smtp-url", url)
    assert result.exit_code == 0, result.output
    assert "skipped: step hook is a webhook step" in result.stderr
    assert len(smtp_server.messages()) == 1
    only_hook = invoke("test-send", str(path), "--to", ME, "--step", "hook", "--smtp-url", url)
    assert only_hook.exit_code == 2
    assert "webhook step" in only_hook.stderr


_PIECE = st.one_of(
    st.characters(exclude_categories=["Cs"]),
    st.sampled_from(list('@.<>"\\\r\n\t ,;:[]()')),
    st.sampled_from(["me@tester.example", "Bcc: x@evil.example", "=?utf-8?q?a?=", "[red]", "é"]),
)
HOSTILE_ADDRESS = st.lists(_PIECE, min_size=1, max_size=12).map("".join)
PLAUSIBLE_ADDRESS = st.from_regex(
    r" ?[A-Za-z0-9._%+=-]{1,10}@[A-Za-z]{1,8}\.example ?", fullmatch=True
)
_FOLDER = Path(tempfile.mkdtemp(prefix="herald-test-send-"))
_PATH, _ADDRESSES = write_campaign(_FOLDER, recipients=2)
_LOADED = load(_PATH)
_HEADERS = {
    "From", "To", "Subject", "Message-ID", "MIME-Version", "X-Herald-Key",
    "X-Herald-Test-Send", "Content-Type", "Content-Transfer-Encoding",
}  # fmt: skip


@settings(max_examples=examples(200), deadline=None)
@given(to=st.one_of(HOSTILE_ADDRESS, PLAUSIBLE_ADDRESS))
def test_any_to_is_refused_or_becomes_exactly_one_recipient(to: str) -> None:
    try:
        jobs, _, _ = compose_tests(_LOADED, to, now=datetime(2026, 12, 7, tzinfo=UTC))
    except UsageError as exc:
        # Refused as an address, or by the header rules every message is built under.
        assert exc.message.startswith(("--to ", "step welcome: invalid email address"))
        assert exc.exit_code == 2
        return
    address = normalise_address(to)
    event("accepted")
    assert [job.recipient for job in jobs] == [address] * 3
    for job in jobs:
        message = _parsed(job.payload)
        assert set(message.keys()) <= _HEADERS  # nothing injected, in any step
        assert len(message.get_all("To") or []) == 1
        [mailbox] = message["To"].addresses
        assert mailbox.addr_spec == address
