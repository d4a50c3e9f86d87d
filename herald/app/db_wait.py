"""Waiting for a database that is starting or restarting, instead of exiting at once.

A service started by systemd may come up before PostgreSQL does, or while it restarts: that is
worth waiting for, with backoff and one log line per attempt saying why. A setting that cannot
work (a malformed URL, a refused login, a database or role that does not exist, an unwritable
SQLite path) is not: waiting would hide it, so it fails at once with the usual one line.

The backoff schedule (``Backoff``) is pure; ``open_waiting`` does the I/O with the clock, the
sleep and the randomness passed in, so tests drive it without waiting.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from dispatch.egress.redact import redact_url
from herald.errors import ConfigError, DatabaseError
from herald.secrets import known_secrets

log = logging.getLogger("herald.service")

T = TypeVar("T")
FOREVER = math.inf
FOREVER_WORDS = frozenset({"forever", "inf", "infinity", "always"})


@dataclass(frozen=True)
class Backoff:
    """0.5 s, doubling up to 30 s, each delay spread by ±``jitter`` so that many workers
    restarted together do not knock on the database in step."""

    first: float = 0.5
    factor: float = 2.0
    ceiling: float = 30.0
    jitter: float = 0.2

    def delays(self, unit_random: Callable[[], float]) -> Iterator[float]:
        """The delays before each retry; ``unit_random`` returns values in [0, 1)."""
        base = self.first
        while True:
            spread = 1.0 + self.jitter * (2.0 * unit_random() - 1.0)
            yield min(self.ceiling, base * spread)
            base = min(self.ceiling, base * self.factor)


def wait_seconds(value: str | None, *, service: bool) -> float:
    """``--database-wait``/``HERALD_DATABASE_WAIT``: seconds, or ``forever``.

    Unset: forever for a service (worker, scheduler, run, serve), 0 for a command that should
    finish (``worker --until-idle``, ``scheduler --once``). ConfigError (exit 2) for anything else.
    """
    if value is None or not value.strip():
        return FOREVER if service else 0.0
    text = value.strip().lower()
    if text in FOREVER_WORDS:
        return FOREVER
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if math.isnan(seconds) or seconds < 0:
        raise ConfigError(
            f"--database-wait / HERALD_DATABASE_WAIT: {value!r} is not a number of seconds",
            hint="use e.g. 60, 0 (do not wait) or forever",
        )
    return seconds


# What the driver says, lowercased, and what it means. Checked in order: permanent first, so
# "FATAL: database "x" does not exist" is never mistaken for a server that is starting.
PERMANENT = (
    "password authentication failed",
    "authentication failed",
    "no password supplied",
    "does not exist",  # the database or the role
    "pg_hba.conf",
    "invalid dsn",
    "invalid connection option",
    "invalid integer value",
    "unable to open database file",  # SQLite: the path
    "readonly database",
    "not a database",
    "permission denied",
    "ssl is not enabled",
    "certificate",
)
WAITABLE = (
    ("connection refused", "connection refused"),
    ("starting up", "the server is starting up"),
    ("in recovery mode", "the server is recovering"),
    ("not yet accepting connections", "the server is starting up"),
    ("shutting down", "the server is shutting down"),
    ("too many connections", "too many connections"),
    ("remaining connection slots", "too many connections"),
    ("administrator command", "the server terminated the connection"),
    ("closed the connection unexpectedly", "the connection was closed"),
    ("server closed the connection", "the connection was closed"),
    ("connection reset", "the connection was reset"),
    ("consuming input failed", "the connection was closed"),
    ("timeout expired", "connection timed out"),
    ("timed out", "connection timed out"),
    ("could not translate host name", "the host name does not resolve (yet)"),
    ("name or service not known", "the host name does not resolve (yet)"),
    ("temporary failure in name resolution", "the host name does not resolve (yet)"),
    ("no route to host", "no route to the host"),
    ("network is unreachable", "the network is unreachable"),
    ("database is locked", "the SQLite database is locked"),
)


def waitable_reason(exc: BaseException, *, sqlite: bool = False) -> str | None:
    """Why waiting may help (a short phrase), or None when it cannot.

    Only a driver's operational error can be waited for (``open_engine``'s DatabaseError carries
    it as its cause); our own errors (a malformed URL, an uncreatable SQLite file) never.
    An operational error we do not recognise is waited for on PostgreSQL (the DB-API's
    definition of it: the database's operation, not the program) and not on SQLite, whose
    only transient state is a lock.
    """
    driver = _driver_error(exc)
    if driver is None:
        return None
    text = " ".join(str(e) for e in _chain(exc)).lower()
    if any(marker in text for marker in PERMANENT):
        return None
    for marker, reason in WAITABLE:
        if marker in text:
            return reason
    if sqlite or type(driver).__name__ not in ("OperationalError", "InterfaceError"):
        return None
    return "the database is not available"


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        orig = getattr(current, "orig", None)
        current = (
            orig if isinstance(orig, BaseException) else current.__cause__ or current.__context__
        )


def _driver_error(exc: BaseException) -> BaseException | None:
    """The SQLAlchemy DBAPIError in ``exc``'s chain (without importing SQLAlchemy to ask)."""
    for link in _chain(exc):
        if any(k.__name__ == "DBAPIError" for k in type(link).__mro__):
            return link
    return None


def detail_of(exc: BaseException) -> str:
    """The driver's first informative line, scrubbed of known credentials."""
    driver = _driver_error(exc)
    source = getattr(driver, "orig", None) or driver or exc
    lines = [line.strip() for line in str(source).splitlines() if line.strip()]
    return known_secrets.scrub(lines[0] if lines else type(exc).__name__)


def open_waiting(
    open_database: Callable[[], T],
    *,
    url: str,
    max_wait: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    unit_random: Callable[[], float] = random.random,
    backoff: Backoff = Backoff(),
) -> T:
    """``open_database()``, retried with backoff for up to ``max_wait`` seconds while the
    failure is one waiting can cure; one ``database_waiting`` warning per failed attempt.

    ``max_wait`` 0 is today's behaviour: the first failure is raised as it is. Past the
    deadline, a DatabaseError saying how long it waited and why.
    """
    sqlite = url.strip().lower().startswith("sqlite")
    shown = redact_url(url)
    started = clock()
    delays = backoff.delays(unit_random)
    attempt = 0
    while True:
        attempt += 1
        try:
            opened = open_database()
        except Exception as exc:
            reason = waitable_reason(exc, sqlite=sqlite)
            if reason is None or max_wait <= 0:
                raise
            waited = clock() - started
            remaining = max_wait - waited
            if remaining <= 0:
                raise DatabaseError(
                    f"cannot open the database {shown}: {reason} "
                    f"(gave up after {waited:.0f} s and {attempt} attempts): {detail_of(exc)}",
                    hint="is the server running? --database-wait / HERALD_DATABASE_WAIT "
                    "sets how long to wait",
                ) from exc
            delay = min(next(delays), remaining)
            log.warning(
                "waiting for the database %s: %s (attempt %d, next in %.1f s): %s",
                shown,
                reason,
                attempt,
                delay,
                detail_of(exc),
                extra={
                    "event": "database_waiting",
                    "database": shown,
                    "reason": reason,
                    "attempt": attempt,
                    "retry_in": round(delay, 3),
                },
            )
            sleep(delay)
            continue
        if attempt > 1:
            log.info(
                "database %s ready after %d attempts",
                shown,
                attempt,
                extra={"event": "database_ready", "database": shown, "attempt": attempt},
            )
        return opened
