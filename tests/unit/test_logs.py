"""herald.logs: whatever a record carries, it is one line (valid JSON in the JSON format), no
secret survives, and ``setup_logging`` sets levels and replaces itself."""

from __future__ import annotations

import io
import json
import logging
import string
import sys
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from herald.logs import (
    JsonFormatter,
    StderrHandler,
    TextFormatter,
    failed_as_json,
    say,
    setup_logging,
)
from herald.secrets import known_secrets
from tests.support.examples import examples

# Any text at all: control characters, line and paragraph separators, quotes, lone surrogates
# (what ``surrogateescape`` makes of undecodable bytes).
HOSTILE = st.text(st.characters(codec=None, exclude_categories=()), max_size=60)
NAMES = st.from_regex(r"[a-z][a-z_]{0,11}", fullmatch=True).filter(
    lambda n: n not in vars(logging.makeLogRecord({})) and n not in {"message", "asctime"}
)
VALUES = st.one_of(
    HOSTILE,
    st.integers(),
    st.floats(),
    st.none(),
    st.lists(HOSTILE, max_size=3),
    st.dictionaries(HOSTILE, HOSTILE, max_size=3),
)


def record(
    message: str,
    fields: dict[str, object],
    *,
    level: int = logging.WARNING,
    error: BaseException | None = None,
) -> logging.LogRecord:
    logger = logging.getLogger("herald.test")
    exc_info = (type(error), error, error.__traceback__) if error is not None else None
    return logger.makeRecord(
        "herald.test", level, __file__, 1, "%s", (message,), exc_info, extra=fields
    )


def raised(message: str) -> BaseException:
    try:
        raise RuntimeError(message)
    except RuntimeError as exc:
        return exc


@settings(max_examples=examples(300), deadline=None)
@given(message=HOSTILE, fields=st.dictionaries(NAMES, VALUES, max_size=5), err=HOSTILE)
def test_a_json_record_is_one_line_of_valid_json_whatever_it_carries(
    message: str, fields: dict[str, object], err: str
) -> None:
    line = JsonFormatter().format(record(message, fields, error=raised(err)))
    assert line.isascii()  # nothing an encoding could fail on
    assert len(line.splitlines()) == 1
    parsed = json.loads(line)
    assert parsed["message"] == message
    assert parsed["level"] == "warning"
    assert parsed["logger"] == "herald.test"
    assert parsed["time"].endswith("Z")
    assert set(fields) - {"event"} <= set(parsed)
    assert parsed["event"] == fields.get("event")
    assert "\n" not in parsed["error"]
    assert parsed["error"].startswith("RuntimeError")


@settings(max_examples=examples(300), deadline=None)
@given(message=HOSTILE, fields=st.dictionaries(NAMES, VALUES, max_size=5), err=HOSTILE)
def test_a_text_record_is_one_writable_line_whatever_it_carries(
    message: str, fields: dict[str, object], err: str
) -> None:
    for plain in (False, True):
        line = TextFormatter().format(
            record(message, {**fields, "plain": plain}, error=raised(err))
        )
        assert len(line.splitlines()) <= 1
        assert "\n" not in line
        assert "\r" not in line
        line.encode("utf-8")  # no lone surrogate left to break the stream


def test_the_text_format_reads_as_time_level_logger_message_then_fields() -> None:
    line = TextFormatter().format(
        record(
            "send failed: 550 no such user",
            {"event": "send_failed", "campaign": "soldes d'été", "step": "welcome", "code": 550},
        )
    )
    stamp, level, logger, rest = line.split(" ", 3)
    assert stamp.endswith("Z")
    assert "T" in stamp
    assert (level, logger) == ("WARNING", "herald.test")
    assert rest == (
        'send failed: 550 no such user event=send_failed campaign="soldes d\'été" '
        "step=welcome code=550"
    )


def test_a_plain_record_is_shown_as_the_line_it_always_was_in_text() -> None:
    plain = record("scheduler running: a pass at least every 30s", {"plain": True, "event": "x"})
    assert TextFormatter().format(plain) == "scheduler running: a pass at least every 30s"
    parsed = json.loads(JsonFormatter().format(plain))
    assert parsed["event"] == "x"
    assert "plain" not in parsed


def test_a_traceback_is_never_printed() -> None:
    line = TextFormatter().format(record("send task failed", {}, error=raised("boom\nline 2")))
    assert "Traceback" not in line
    assert line.endswith('error="RuntimeError: boom"')


SECRETS = st.text(string.ascii_letters + string.digits + "!$%&*+-./:;<=>?@^_~", min_size=6)


@settings(max_examples=examples(200), deadline=None)
@given(secret=SECRETS, before=HOSTILE, after=HOSTILE)
def test_a_known_secret_never_appears_in_either_format(
    secret: str, before: str, after: str
) -> None:
    known_secrets.learn([secret])
    try:
        text = f"{before}{secret}{after}"
        fields: dict[str, object] = {
            "event": "send_failed",
            "reason": text,
            "nested": {"relay": text, "list": [text]},
        }
        for formatter in (TextFormatter(), JsonFormatter()):
            line = formatter.format(record(text, fields, error=raised(text)))
            assert secret not in line
            if isinstance(formatter, JsonFormatter):
                assert secret not in json.dumps(json.loads(line), ensure_ascii=False)
    finally:
        known_secrets.forget()


@pytest.fixture
def restored_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    names = ("herald", "sqlalchemy", "uvicorn", "apscheduler", "aiosmtpd")
    levels = {name: logging.getLogger(name).level for name in names}
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, old in levels.items():
        logging.getLogger(name).setLevel(old)


@pytest.mark.usefixtures("restored_logging")
def test_setup_sets_the_levels_and_replaces_itself(capsys: pytest.CaptureFixture[str]) -> None:
    setup_logging("info", "text")
    setup_logging("warning", "json")
    ours = [h for h in logging.getLogger().handlers if isinstance(h, StderrHandler)]
    assert len(ours) == 1
    assert logging.getLogger("herald").level == logging.WARNING
    assert logging.getLogger("sqlalchemy").level == logging.WARNING
    logging.getLogger("herald.worker").info("not shown", extra={"event": "claim_batch"})
    logging.getLogger("herald.worker").warning("shown", extra={"event": "send_failed"})
    logging.getLogger("sqlalchemy.engine").info("SELECT 1")
    lines = capsys.readouterr().err.splitlines()
    assert [json.loads(line)["event"] for line in lines] == ["send_failed"]

    setup_logging("debug", "text")
    assert logging.getLogger("herald").level == logging.DEBUG
    assert logging.getLogger("uvicorn").level == logging.DEBUG
    assert logging.getLogger("sqlalchemy").level == logging.INFO  # statements, never rows
    logging.getLogger("herald.worker").debug("claimed 3 job(s)", extra={"event": "claim_batch"})
    (line,) = capsys.readouterr().err.splitlines()
    assert line.endswith("claimed 3 job(s) event=claim_batch")


@pytest.mark.usefixtures("restored_logging")
def test_json_only_records_are_not_said_twice_in_text(capsys: pytest.CaptureFixture[str]) -> None:
    fired = {"event": "fired", "campaign": "digest", "json_only": True}
    setup_logging("info", "text")
    say("digest: fired 2026-12-07T09:00:00Z, 3 new job(s)", "scheduler_pass")
    logging.getLogger("herald.scheduler").info("digest fired", extra=fired)
    assert capsys.readouterr().err == "digest: fired 2026-12-07T09:00:00Z, 3 new job(s)\n"
    setup_logging("info", "json")
    logging.getLogger("herald.scheduler").info("digest fired", extra=fired)
    (line,) = capsys.readouterr().err.splitlines()
    assert json.loads(line)["campaign"] == "digest"


def test_unknown_levels_and_formats_are_refused() -> None:
    with pytest.raises(ValueError, match="log level"):
        setup_logging("loud", "text")
    with pytest.raises(ValueError, match="log format"):
        setup_logging("info", "xml")
    assert sys.stderr is not None


@pytest.mark.usefixtures("restored_logging")
def test_a_final_error_is_a_record_only_for_the_json_command_that_set_up(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    setup_logging("info", "text")
    assert not failed_as_json("relay unreachable", hint=None, code=1)
    setup_logging("info", "json")
    assert failed_as_json("relay unreachable", hint="check --smtp-url", code=1)
    (line,) = capsys.readouterr().err.splitlines()
    record = json.loads(line)
    assert (record["event"], record["exit_code"]) == ("error", 1)
    assert record["hint"] == "check --smtp-url"
    # Another command in the same process (its own stderr) prints its errors as text again.
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert not failed_as_json("relay unreachable", hint=None, code=1)


def test_a_fire_is_one_structured_record_per_campaign(caplog: pytest.LogCaptureFixture) -> None:
    from datetime import UTC, datetime

    from herald.app.scheduler_pass import _log_fired
    from scheduler.passes import CampaignPass

    monday, tuesday = (datetime(2026, 12, day, 9, tzinfo=UTC) for day in (7, 8))
    campaign = CampaignPass("digest", "schedule", fired=[tuesday, monday], new_jobs=6)
    with caplog.at_level(logging.INFO, logger="herald.scheduler"):
        _log_fired(campaign)
    (fired,) = caplog.records
    parsed = json.loads(JsonFormatter().format(fired))
    assert parsed["event"] == "fired"
    assert (parsed["campaign"], parsed["jobs"], parsed["trigger"]) == ("digest", 6, "schedule")
    assert parsed["occurrence"] == "2026-12-08T09:00:00Z"
    assert parsed["occurrences"] == ["2026-12-07T09:00:00Z", "2026-12-08T09:00:00Z"]
    assert "json_only" not in parsed
