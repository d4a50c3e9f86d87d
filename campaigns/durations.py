"""Step delays written the way people say them: 0, 90s, 90m, 3h, 3d, 2w, 1d12h.

Deliberately narrow: units are lower-case only (an upper-case 'M' reads as months to many people
and would silently become minutes), each unit appears at most once and from largest to smallest,
and a bare number other than 0 is rejected because its unit would be a guess.
"""

from __future__ import annotations

import re
from datetime import timedelta

DURATION_HINT = "use e.g. 0, 90m, 3d"

# Far beyond any sensible campaign step, yet far from datetime overflow when added to "now".
MAX_DURATION = timedelta(days=3650)

_UNITS: dict[str, timedelta] = {
    "w": timedelta(weeks=1),
    "d": timedelta(days=1),
    "h": timedelta(hours=1),
    "m": timedelta(minutes=1),
    "s": timedelta(seconds=1),
}
_ORDER = list(_UNITS)
_PART = re.compile(r"(\d+)\s*([A-Za-z]+)\s*")


def _invalid(raw: str | int, reason: str) -> ValueError:
    return ValueError(f"invalid duration {raw!r}: {reason}")


def _parse_parts(raw: str, text: str) -> timedelta:
    total = timedelta(0)
    seen: list[str] = []
    position = 0
    while position < len(text):
        match = _PART.match(text, position)
        if match is None:
            raise _invalid(raw, "expected a number followed by a unit (w, d, h, m, s)")
        number, unit = match.groups()
        if unit not in _UNITS:
            raise _invalid(raw, f"unknown unit {unit!r}; units are w, d, h, m, s")
        if unit in seen:
            raise _invalid(raw, f"unit {unit!r} appears twice")
        if seen and _ORDER.index(unit) < _ORDER.index(seen[-1]):
            raise _invalid(raw, "write units from largest to smallest, e.g. 1d12h")
        seen.append(unit)
        try:
            total += int(number) * _UNITS[unit]
        except OverflowError:
            total = timedelta.max
        if total > MAX_DURATION:
            raise _invalid(raw, f"longer than the maximum of {MAX_DURATION.days} days")
        position = match.end()
    return total


def parse_duration(raw: str | int) -> timedelta:
    """Parse a step delay; raise ValueError saying what is wrong with it."""
    if isinstance(raw, bool) or not isinstance(raw, (str, int)):
        raise ValueError(f"expected a duration such as 90m or 3d, got {raw!r}")
    if isinstance(raw, int):
        if raw < 0:
            raise _invalid(raw, "negative delays are not allowed")
        if raw != 0:
            raise _invalid(raw, "a number needs a unit (w, d, h, m or s)")
        return timedelta(0)
    text = raw.strip()
    if not text:
        raise _invalid(raw, "it is empty")
    if text.startswith("-"):
        raise _invalid(raw, "negative delays are not allowed")
    if text.isdigit():
        if int(text) != 0:
            raise _invalid(raw, "a number needs a unit (w, d, h, m or s)")
        return timedelta(0)
    return _parse_parts(raw, text)


def format_duration(delay: timedelta) -> str:
    """The inverse of parse_duration for whole seconds: timedelta(days=1, hours=12) -> '1d12h'."""
    if delay < timedelta(0) or delay % timedelta(seconds=1):
        raise ValueError(f"cannot write {delay!r} as a duration of whole seconds")
    remaining = delay
    text = ""
    for unit, size in _UNITS.items():
        count, remaining = divmod(remaining, size)
        if count:
            text += f"{count}{unit}"
    return text or "0"
