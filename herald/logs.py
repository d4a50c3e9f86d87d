"""Herald's logs: one line per event that matters, to stderr, as text or JSON lines.

Every module logs through stdlib ``logging`` under ``herald.*`` (dispatch's worker uses
``herald.worker``) and names the event in ``extra``: ``log.warning("...", extra={"event":
"send_failed", "campaign": ..., "step": ..., "key": ..., "worker": ...})``. Long-running commands
call ``setup_logging`` once, from ``--log-level``/``--log-format`` (herald/cli/log_options.py);
docs/operations/logging.md lists the events and their fields.

Two promises hold for any record, whatever its message or extras contain:

- **one record, one line.** The text format shows control characters (newlines included) as
  escapes (``herald.output.visible``); the JSON format is ``json.dumps`` with ASCII escapes, so
  not even a lone surrogate from undecodable input can break the line or the encoding. An
  exception becomes an ``error`` field (type and first line), never a traceback.
- **no secret.** Messages, extras and errors go through ``herald.secrets.known_secrets`` (the
  credentials of the URLs this process parsed), as ``fail()`` does for errors.

A record with ``plain=True`` in its extras is a human line a command has always printed (the
scheduler's pass summary, "stopping: ..."): the text format shows its message alone, as before,
and the JSON format gives it its event like any other. A record with ``json_only=True`` is the
structured form of what such a line already said (the scheduler's ``fired``): JSON only, so the
text format does not say it twice.
"""

from __future__ import annotations

import json
import logging
import math
import sys
import traceback
from datetime import UTC, datetime
from typing import Final

from herald.output import visible
from herald.secrets import known_secrets

LEVELS: Final = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}
FORMATS: Final = ("text", "json")
# Chatty below warning; shown in full only with --log-level debug.
LIBRARIES: Final = ("uvicorn", "sqlalchemy", "aiosmtpd", "mail.log", "apscheduler", "asyncio")
# The fields that lead a JSON line, in this order; any other extra follows them.
LEADING: Final = ("campaign", "step", "key", "worker")

# What every LogRecord has: anything else on a record came from ``extra``.
_STANDARD: Final = frozenset(vars(logging.makeLogRecord({}))) | {
    "message",
    "asctime",
    "plain",
    "json_only",
}


def extras(record: logging.LogRecord) -> dict[str, object]:
    """The structured fields a call passed in ``extra`` (``event`` included)."""
    return {
        name: value
        for name, value in vars(record).items()
        if name not in _STANDARD and not name.startswith("_")
    }


def _scrub(text: str) -> str:
    return known_secrets.scrub(text)


def _error(record: logging.LogRecord) -> str | None:
    """The record's exception as one line: its type and the first line of its message."""
    if not record.exc_info or record.exc_info[1] is None:
        return None
    exc = record.exc_info[1]
    lines = traceback.format_exception_only(type(exc), exc)
    first = lines[-1].strip().splitlines()[0] if lines else type(exc).__name__
    return _scrub(first)


def _timestamp(record: logging.LogRecord) -> str:
    moment = datetime.fromtimestamp(record.created, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _one_line(text: str) -> str:
    """Control characters as escapes, and what no encoding could write (lone surrogates)
    as backslash escapes too."""
    return visible(text).encode("utf-8", "backslashreplace").decode("utf-8")


def _text_value(value: object) -> str:
    if isinstance(value, dict | list | tuple):  # compact JSON: one token, still readable
        return _scrub(json.dumps(_scrubbed(value), separators=(",", ":"), default=_jsonable))
    text = _scrub(value if isinstance(value, str) else str(value))
    if text == "" or any(char in text for char in ' "=\\') or not text.isprintable():
        # Quoted and escaped, so a value never runs into the next key; letters stay letters.
        return json.dumps(text, ensure_ascii=False)
    return text


class TextFormatter(logging.Formatter):
    """``2026-12-03T07:04:45.123Z INFO herald.worker message event=... key=value``."""

    def format(self, record: logging.LogRecord) -> str:
        message = _scrub(record.getMessage())
        if getattr(record, "plain", False):
            line = message
        else:
            fields = {**extras(record)}
            error = _error(record)
            if error is not None:
                fields["error"] = error
            pairs = " ".join(f"{name}={_text_value(value)}" for name, value in fields.items())
            head = f"{_timestamp(record)} {record.levelname} {record.name} {message}"
            line = f"{head} {pairs}" if pairs else head
        return _one_line(line)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, event, then the extras."""

    def format(self, record: logging.LogRecord) -> str:
        given = extras(record)
        fields: dict[str, object] = {
            "time": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": _scrub(record.getMessage()),
            "event": given.pop("event", None),
        }
        for name in LEADING:
            if name in given:
                fields[name] = given.pop(name)
        fields.update(given)
        error = _error(record)
        if error is not None:
            fields["error"] = error
        # Scrubbed field by field, never as JSON text: a secret that looks like JSON syntax
        # must not be able to cut an object apart.
        return json.dumps(_scrubbed(fields), ensure_ascii=True, default=_jsonable)


def _jsonable(value: object) -> str:
    return _scrub(str(value))


def _scrubbed(value: object) -> object:
    if isinstance(value, str):
        return _scrub(value)
    if isinstance(value, dict):
        return {_scrub(str(name)): _scrubbed(item) for name, item in value.items()}
    if isinstance(value, list | tuple):
        return [_scrubbed(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # JSON has no NaN or Infinity
    return value


class StderrHandler(logging.Handler):
    """Writes to whatever ``sys.stderr`` is when the record comes (a test's capture, too)."""

    def __init__(self) -> None:
        super().__init__()
        # The stream of the command that set logging up: ``failed_as_json`` only speaks for
        # that command (tests run many commands in one process, each with its own stderr).
        self.set_up_for = sys.stderr

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
            stream = sys.stderr
            stream.write(line + "\n")
            stream.flush()
        except RecursionError:
            raise
        except Exception:
            self.handleError(record)


def _not_json_only(record: logging.LogRecord) -> bool:
    return not getattr(record, "json_only", False)


def formatter(fmt: str) -> logging.Formatter:
    if fmt == "json":
        return JsonFormatter()
    if fmt == "text":
        return TextFormatter()
    raise ValueError(f"unknown log format {fmt!r} (one of {', '.join(FORMATS)})")


def setup_logging(level: str = "info", fmt: str = "text") -> None:
    """Send every record of the ``herald`` tree at ``level`` or above to stderr in ``fmt``;
    the libraries' only from warning up, unless ``level`` is debug. Calling it again
    replaces the previous set-up."""
    if level not in LEVELS:
        raise ValueError(f"unknown log level {level!r} (one of {', '.join(LEVELS)})")
    chosen = LEVELS[level]
    handler = StderrHandler()
    handler.setFormatter(formatter(fmt))
    if fmt == "text":
        handler.addFilter(_not_json_only)
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, StderrHandler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if chosen == logging.DEBUG else logging.WARNING)
    logging.getLogger("herald").setLevel(chosen)
    for name in LIBRARIES:
        logging.getLogger(name).setLevel(_library_level(name, chosen))


def _library_level(name: str, chosen: int) -> int:
    if chosen != logging.DEBUG:
        return logging.WARNING
    # SQLAlchemy's debug is every row read (message bodies included): its statements suffice.
    return logging.INFO if name == "sqlalchemy" else logging.DEBUG


say_log = logging.getLogger("herald.cli")


def failed_as_json(message: str, *, hint: str | None, code: int) -> bool:
    """With ``--log-format json``, the command's final error as a record (so every stderr line
    parses); False, having logged nothing, in the text format or when logging is not set up."""
    current = [
        h
        for h in logging.getLogger().handlers
        if isinstance(h, StderrHandler) and h.set_up_for is sys.stderr
    ]
    if not current or not isinstance(current[-1].formatter, JsonFormatter):
        return False
    fields: dict[str, object] = {"event": "error", "exit_code": code}
    if hint:
        fields["hint"] = hint
    say_log.error("%s", message, extra=fields)
    return True


def say(line: str, event: str, *, level: int = logging.INFO, **fields: object) -> None:
    """A line a command has always printed on stderr, now a log record: unchanged in the text
    format, an object with ``event`` in JSON."""
    say_log.log(level, "%s", line, extra={"event": event, "plain": True, **fields})
