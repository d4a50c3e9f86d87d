"""What every use case shares: the clock and the name recorded as the actor of a change."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from datetime import UTC, datetime

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


def operator_name(environ: Mapping[str, str] | None = None) -> str:
    """Who is at the keyboard, for the journal: ``HERALD_OPERATOR``, else ``USER``."""
    env = os.environ if environ is None else environ
    return env.get("HERALD_OPERATOR") or env.get("USER") or "unknown"
