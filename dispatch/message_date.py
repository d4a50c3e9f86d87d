"""The ``Date:`` of an email is the moment it is sent (docs/design.md §6).

A message's bytes are rendered when its job is materialised, possibly days before it goes out
(a later step, a send window, a retry), so the stored payload carries no ``Date``: the worker
stamps it once the job has crossed T4, from the T4 commit's ``send_started_at`` on the
database clock. A re-read of the same attempt (a T4 commit whose outcome was unknown) finds
the same ``send_started_at`` and so stamps the same ``Date``; a retry is a new attempt with a
new T4, and its ``Date`` is when it went out. The Message-ID and the key never change.

Payloads that already hold a ``Date`` (materialised by a Herald that rendered it) are sent
exactly as stored.
"""

from __future__ import annotations

from datetime import UTC, datetime
from email.utils import format_datetime

_CRLF = b"\r\n"
# build_message writes ``Date`` just before ``Message-ID``; the stamp keeps that place.
_MESSAGE_ID = b"\r\nmessage-id:"
_DATE_LINE = b"\r\ndate:"


def date_value(at: datetime) -> str:
    """``at`` as an RFC 5322 date-time in UTC, whole seconds: ``Tue, 04 Mar 2025 05:06:07 +0000``.

    A naive ``at`` is taken as UTC, the only zone Herald stores times in.
    """
    aware = at if at.tzinfo is not None else at.replace(tzinfo=UTC)
    return format_datetime(aware.astimezone(UTC).replace(microsecond=0))


def has_date(message: bytes) -> bool:
    """Whether the header block of ``message`` holds a ``Date`` field.

    Continuation lines start with whitespace, so only a field named ``Date`` matches.
    """
    # One search instead of a loop over the lines (this runs for every message sent): a line
    # of the header block starts with ``Date:`` exactly when CRLF ``date:`` occurs in CRLF +
    # the block, lowercased.
    end = message.find(_CRLF + _CRLF)
    head = message if end < 0 else message[:end]
    return _DATE_LINE in (_CRLF + head).lower()


def with_date(message: bytes, at: datetime) -> bytes:
    """``message`` with a ``Date`` header for ``at``, unless it already holds one."""
    if has_date(message):
        return message
    field = f"Date: {date_value(at)}".encode("ascii") + _CRLF
    head_end = message.find(_CRLF + _CRLF)
    head = message if head_end < 0 else message[:head_end]
    before_id = head.lower().find(_MESSAGE_ID)
    if before_id < 0:
        return field + message
    cut = before_id + len(_CRLF)
    return message[:cut] + field + message[cut:]
