"""Find jobs by a prefix of their idempotency key, for operator commands.

A key is 64 lower-case hex characters (``dispatch.keys``). Operators paste the 16-character
prefix that ``list`` shows; this module owns the rule for what a usable prefix is, so every
command that takes keys applies the same one: at least ``MIN_PREFIX`` hex characters (case does
not matter), and it must name exactly one job. An empty or short prefix would otherwise match
every job and turn a typo into a mass action.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import sqlalchemy as sa

from dispatch.models import send_job
from dispatch.outbox.keyed import with_key_prefix

MIN_PREFIX = 8
KEY_LENGTH = 64
_HEX = re.compile(rf"[0-9a-f]{{{MIN_PREFIX},{KEY_LENGTH}}}")

J = send_job.c


class KeyPrefixError(ValueError):
    """A key prefix is malformed (invalid input) or does not name exactly one job."""

    def __init__(self, message: str, *, invalid_input: bool) -> None:
        super().__init__(message)
        self.invalid_input = invalid_input


def normalise_prefix(raw: str) -> str:
    """The lower-case prefix, or KeyPrefixError(invalid_input=True) when it cannot be one."""
    prefix = raw.lower()
    if _HEX.fullmatch(prefix) is None:
        raise KeyPrefixError(
            f"invalid key prefix {_shown(raw)}: give {MIN_PREFIX} to {KEY_LENGTH} hex "
            "characters of a job key",
            invalid_input=True,
        )
    return prefix


@dataclass(frozen=True)
class KeyMatch:
    key: str
    campaign: str
    step: str
    state: str


def match_prefix(conn: sa.Connection, raw: str, *, show: int = 3) -> str:
    """The one key starting with ``raw`` (in any state), or KeyPrefixError.

    Matching runs over every job, not just those in the state a command acts on: a prefix
    identifies a job, and whether that job is in the right state is the command's business.
    """
    prefix = normalise_prefix(raw)
    # Hex only, so the LIKE pattern holds no wildcard of its own.
    rows = conn.execute(
        sa.select(J.key, J.campaign, J.step, J.state)
        .where(with_key_prefix(prefix))
        .order_by(J.key)
        .limit(show + 1)
    ).all()
    if not rows:
        raise KeyPrefixError(f"no job has a key starting with {prefix}", invalid_input=False)
    if len(rows) > 1:
        listed = ", ".join(f"{r.key[:16]} ({r.campaign}/{r.step}, {r.state})" for r in rows[:show])
        more = f" and {len(rows) - show}+ more" if len(rows) > show else ""
        raise KeyPrefixError(
            f"key prefix {prefix} is ambiguous: it matches {listed}{more}; give more characters",
            invalid_input=True,
        )
    key: str = rows[0].key
    return key


_SHOWN_MAX = 60


def _shown(raw: str) -> str:
    """A short, printable, markup-free rendering of what the operator typed."""
    # Cut after escaping: one character can escape to ten ('\U0001f600'), so cutting the raw
    # text first would bound the count of characters, not the length of the message.
    text = ascii(raw)
    if len(text) > _SHOWN_MAX:
        text = text[:_SHOWN_MAX] + "…"
    return "".join(c if c.isalnum() or c in "'\\ .-_…" else "?" for c in text)
