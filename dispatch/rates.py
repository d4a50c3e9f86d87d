"""Rate limits as values: ``50/s`` parsed, the per-domain defaults, and GCRA's arithmetic.

A limit is a count per period (``/s``, ``/m``, ``/h``). Every worker on every host shares one
GCRA cell per limited key in the ``rate_limit`` table (``dispatch.outbox.rates``): the cell
holds a *theoretical arrival time* (TAT), and a send may start when ``TAT - now <= tolerance``,
moving TAT to ``max(TAT, now) + interval``. The functions here are that arithmetic on plain
floats (seconds), the single definition the SQL mirrors and the property test checks: in any
window of length ``t`` no more than ``rate * (t + EPSILON) + burst`` sends are allowed.

The burst is one second's worth of sends (at least one): ``20/s`` may send 20 at once after a
quiet spell, then one every 50 ms. A slower limit (``100/h``) has a burst of one.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from email.utils import parseaddr

PERIODS = {"s": 1.0, "m": 60.0, "h": 3600.0}
RATE_HINT = "write a count per second, minute or hour, such as 50/s, 300/m or 1000/h"
_RATE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*/\s*([smh])\s*")
MAX_PER_SECOND = 100_000.0  # beyond this a limit is a typo, not a limit

# Receivers that publish sending guidance, and a pace they tolerate from a young IP. Operators
# override or extend them with HERALD_DOMAIN_RATES (docs/deliverability/rate-limits.md).
DEFAULT_DOMAIN_RATES: Mapping[str, str] = {
    "gmail.com": "20/s",
    "googlemail.com": "20/s",
    "yahoo.com": "20/s",
    "outlook.com": "20/s",
    "hotmail.com": "20/s",
}

# Replies that mean "too fast, come back later": 421 (service not available, closing),
# 451 (local error / greylisting / rate), 454 (temporary authentication or TLS failure, which
# large receivers also use for throttling). One of them slows that domain down for a while.
SLOWDOWN_CODES = frozenset({421, 451, 454})
SLOWDOWN_SECONDS = 600.0  # how long a slowdown lasts after the last one
SLOWDOWN_EVERY = 30.0  # at most one halving per this many seconds (a burst of 421s is one)
SLOWDOWN_FLOOR = 1 / 16  # never slower than a sixteenth of the configured rate
# Seconds: float noise in epoch arithmetic (a double near 1.8e9 resolves ~0.2 µs, and a burst
# adds up many intervals) must not refuse a slot that is exactly due. It lets at most a
# millisecond's worth more through: rate * (t + EPSILON) + burst in any window of t seconds.
EPSILON = 1e-3


class RateError(ValueError):
    """A rate that cannot be read; ``hint`` says what would be."""

    def __init__(self, message: str, hint: str = RATE_HINT) -> None:
        super().__init__(message)
        self.hint = hint


@dataclass(frozen=True)
class Rate:
    count: float
    period: str  # "s" | "m" | "h"

    @property
    def per_second(self) -> float:
        return self.count / PERIODS[self.period]

    def __str__(self) -> str:
        count = int(self.count) if self.count == int(self.count) else self.count
        return f"{count}/{self.period}"


def parse_rate(text: object) -> Rate:
    """``"50/s"`` → Rate(50, "s"); RateError for anything else (zero, negative, no unit)."""
    if not isinstance(text, str):
        raise RateError(f"expected a rate such as 50/s, got {type(text).__name__} {text!r}")
    if len(text) > 40:
        raise RateError(f"invalid rate {text[:40]!r}…: too long")
    match = _RATE.fullmatch(text)
    if match is None:
        raise RateError(f"invalid rate {text!r}")
    count = float(match.group(1))
    rate = Rate(count, match.group(2))
    if count <= 0:
        raise RateError(f"invalid rate {text!r}: must be more than zero")
    if rate.per_second > MAX_PER_SECOND:
        raise RateError(f"invalid rate {text!r}: more than {MAX_PER_SECOND:g} per second")
    return rate


def parse_domain_rates(text: str | None) -> dict[str, Rate]:
    """The defaults, overridden and extended by ``"gmail.com=20/s,example.org=5/s"`` (the
    ``HERALD_DOMAIN_RATES`` setting); ``domain=off`` removes a default."""
    rates = {domain: parse_rate(value) for domain, value in DEFAULT_DOMAIN_RATES.items()}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        domain, sep, value = item.partition("=")
        domain = domain.strip().lower().rstrip(".")
        if not sep or not domain or "@" in domain or " " in domain:
            raise RateError(
                f"invalid domain rate {item.strip()!r}",
                "write domain=rate pairs separated by commas, such as "
                "gmail.com=20/s,example.org=5/s (domain=off removes a default)",
            )
        if value.strip().lower() == "off":
            rates.pop(domain, None)
            continue
        try:
            rates[domain] = parse_rate(value)
        except RateError as exc:
            raise RateError(f"{domain}: {exc}", exc.hint) from None
    return rates


def domain_of(recipient: str) -> str:
    """The recipient's domain, lower case, without a trailing dot ('' when there is none)."""
    address = parseaddr(recipient)[1] or recipient
    _, at, domain = address.rpartition("@")
    return domain.strip().lower().rstrip(".") if at else ""


def campaign_key(name: str) -> str:
    return f"campaign:{name}"


def domain_key(domain: str) -> str:
    return f"domain:{domain}"


# ---------------------------------------------------------------------- GCRA arithmetic


def tolerance(per_second: float) -> float:
    """Seconds TAT may run ahead of now: a burst of one second's sends (at least one)."""
    burst = max(1, math.floor(per_second))
    return (burst - 1) / per_second


def burst(per_second: float) -> int:
    """How many sends the tolerance lets through at once."""
    return max(1, math.floor(per_second))


def effective(per_second: float, factor: float, slowed_until: float | None, now: float) -> float:
    """The rate in force: slowed by ``factor`` until ``slowed_until``, then the full rate."""
    if slowed_until is not None and slowed_until > now:
        return per_second * factor
    return per_second


def _start(tat: float | None, now: float) -> float:
    """Where the next grant counts from: the TAT, or now once the TAT has passed."""
    return now if tat is None or tat < now else tat


def acquire(tat: float | None, now: float, per_second: float) -> tuple[bool, float | None]:
    """One GCRA decision: (allowed, new TAT). Refused: TAT is unchanged."""
    if _start(tat, now) - now > tolerance(per_second) + EPSILON:
        return False, tat
    return True, granted(tat, now, per_second)


def next_slot(tat: float | None, now: float, per_second: float) -> float:
    """The earliest moment a send would be allowed (``now`` when it would be now)."""
    if tat is None:
        return now
    return max(now, tat - tolerance(per_second))


def slot_after(tat: float | None, now: float, per_second: float, ahead: int) -> float:
    """When a send would be allowed if ``ahead`` others took their slots first, at ``now``:
    ``next_slot`` after ``ahead`` grants (``now`` when it would be now). A worker's estimate of
    the slot a claim would find at T4, with the claims it already let wait for theirs."""
    return max(now, _start(tat, now) + ahead / per_second - tolerance(per_second))


def granted(tat: float | None, now: float, per_second: float) -> float:
    """The TAT after a send allowed at ``now`` (``acquire``'s, without the check)."""
    return _start(tat, now) + 1.0 / per_second
