"""How the CLI writes an instant for people: the local wall time (weekday, date, time, zone
abbreviation) and the UTC time beside it, so a DST change is visible as a change of offset."""

from __future__ import annotations

from datetime import UTC, datetime


def _clock(moment: datetime) -> str:
    return moment.strftime("%H:%M:%S" if moment.second else "%H:%M")


def local_text(moment: datetime, zone_name: str) -> str:
    """``Mon 2026-12-07 09:00 CET``: ``moment`` on the wall clock of ``zone_name``."""
    from dispatch.wallclock import zone

    local = moment.astimezone(zone(zone_name))
    return f"{local:%a %Y-%m-%d} {_clock(local)} {local.tzname() or zone_name}"


def utc_text(moment: datetime) -> str:
    """``2026-12-07 08:00Z``."""
    utc = moment.astimezone(UTC)
    return f"{utc:%Y-%m-%d} {_clock(utc)}Z"


def both(moment: datetime, zone_name: str) -> str:
    """``Mon 2026-12-07 09:00 CET (08:00Z)``, the UTC date added when it differs; UTC alone
    when the zone is UTC."""
    if zone_name == "UTC":
        return utc_text(moment)
    from dispatch.wallclock import zone

    utc = moment.astimezone(UTC)
    same_day = utc.date() == moment.astimezone(zone(zone_name)).date()
    shown = f"{_clock(utc)}Z" if same_day else utc_text(utc)
    return f"{local_text(moment, zone_name)} ({shown})"
