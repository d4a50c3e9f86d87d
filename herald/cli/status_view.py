"""The screen of ``herald status``: a snapshot (``herald.app.status.status``) laid out as lines
of at most ``width`` terminal cells. Pure: no database, no clock, no terminal; the snapshot's
``now`` is the only time it knows, so a snapshot renders the same way every time.

Layout, for any width:

- a headline (time, totals, overall rate), then what needs an operator first (unreachable
  relays, in-doubt and failed messages);
- per campaign: its name and status, its progress (sent of total, left, rate, ETA), a table of
  its steps in campaign order, its top failure reasons, its schedule and notes.

Campaign names, reasons and notes are wrapped, never cut. In the steps table a step name too
long for its column is shortened in the middle with ``…``; when the screen is too narrow for
every count, the least telling columns (claimed, sending, cancelled, ETA, rate, pending) give
way and a last line says which; narrower still, each step is shown stacked, name on its own line.
``width`` None (piped output) lays everything out at its natural width: nothing is shortened.

Data is shown literally: every string from the snapshot goes through ``visible`` and into a
``Text`` (never parsed as markup); only Herald's own words carry style.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from rich.text import Text

from herald.cli.textfit import NARROWEST, fold, middle, pack, pad
from herald.cli.timefmt import both, utc_text
from herald.output import styled, visible

_STATES: Final = (
    ("pending", "pending"),
    ("claimed", "claimed"),
    ("sending", "sending"),
    ("sent", "sent"),
    ("failed", "failed"),
    ("in_doubt", "in doubt"),
    ("cancelled", "cancelled"),
)
_ALARMS: Final = {"in_doubt": "bold yellow", "failed": "bold red"}
_STATUS_STYLES: Final = {
    "active": "cyan",
    "completed": "green",
    "paused": "bold yellow",
    "cancelled": "dim",
}
#: The columns that give way on a narrow screen, first to last.
_DROP_ORDER: Final = ("claimed", "sending", "cancelled", "eta", "rate", "pending")
_INDENT: Final = 2
_STEP_MIN: Final = 8  # a step column narrower than this says too little
_NONE: Final = "—"
_LATE: Final = timedelta(minutes=5)  # a scheduler fires within minutes of the time
_BUCKETS: Final = (
    ("now", "now"),
    ("within_1h", "<1h"),
    ("within_24h", "<24h"),
    ("within_7d", "<7d"),
    ("later", "later"),
)


@dataclass(frozen=True)
class _Column:
    key: str
    title: str
    right: bool = True


@dataclass(frozen=True)
class _Layout:
    """The steps table, the same for every campaign so that columns line up down the screen."""

    columns: tuple[_Column, ...]  # after the step column
    widths: dict[str, int]  # per column key, "step" included
    gap: int
    hidden: tuple[str, ...]  # titles of the columns left out for lack of width
    stacked: bool  # too narrow for a table at all


def status_lines(snapshot: dict[str, Any], width: int | None) -> list[Text]:
    """The whole screen; every line at most ``width`` cells (``None``: unbounded)."""
    if width is not None:
        width = max(width, NARROWEST)
    now = datetime.fromisoformat(snapshot["now"])
    lines = pack(_headline(snapshot, now), width)
    lines += _alarms(snapshot, width)
    documents = snapshot["campaigns"]
    if not documents:
        return [*lines, *fold(Text("no campaigns yet: `herald launch FILE` starts one"), width)]
    layout = _layout(documents, now, width)
    for doc in documents:
        lines.append(Text(""))
        lines += _campaign(doc, layout, now, width)
    if layout.hidden:
        note = (
            f"(too narrow for every column: {', '.join(layout.hidden)} not shown;"
            " a wider screen or `--json` has them)"
        )
        lines += [Text(""), *fold(styled(note, "dim"), width)]
    return lines


# ---------------------------------------------------------------------- headline and alarms


def _headline(snapshot: dict[str, Any], now: datetime) -> list[Text]:
    totals = snapshot["totals"]
    count = len(snapshot["campaigns"])
    items = [
        styled("herald status", "bold"),
        Text(utc_text(now)),
        Text(f"{count} campaign{'' if count == 1 else 's'}"),
        Text(f"{totals['sent']} sent"),
        Text(f"{snapshot.get('left', 0)} left"),
    ]
    if snapshot.get("rate_per_minute"):
        items.append(Text(f"{_rate(snapshot['rate_per_minute'])}/min"))
    return items


def _alarms(snapshot: dict[str, Any], width: int | None) -> list[Text]:
    lines: list[Text] = []
    for relay in snapshot.get("relays", []):
        if relay["state"] != "unreachable":
            continue
        since = utc_text(datetime.fromisoformat(relay["since"]))
        detail = visible(relay["last_error"] or "no detail")
        lines += _para(
            Text.assemble(
                styled(f"✗ relay unreachable since {since}", "bold red"),
                f" ({visible(relay['relay'])}): {detail} — jobs wait for it, no attempt counted",
            ),
            width,
        )
    if snapshot["in_doubt"]:
        lines += _para(
            Text.assemble(
                styled(f"⚠ {snapshot['in_doubt']} message(s) IN DOUBT", "bold yellow"),
                " — may or may not have been delivered; see `herald in-doubt list`",
            ),
            width,
        )
    if snapshot["failed"]:
        lines += _para(
            Text.assemble(
                styled(f"✗ {snapshot['failed']} message(s) FAILED", "bold red"),
                " — see `herald dead list`",
            ),
            width,
        )
    return lines


def _para(text: Text, width: int | None) -> list[Text]:
    """One paragraph, continuation lines indented under its first."""
    return pack([text], width, hang=_INDENT)


# ---------------------------------------------------------------------- one campaign


def _campaign(doc: dict[str, Any], layout: _Layout, now: datetime, width: int | None) -> list[Text]:
    status = doc["status"]
    heading = [
        styled(doc["name"], "bold"),
        styled(status, _STATUS_STYLES.get(status, "")),
        Text(f"v{doc['version']}"),
        Text(doc["trigger"]),
    ]
    lines = pack(heading, width)
    lines += pack(_progress(doc, now), width, indent=_INDENT)
    lines += _steps(doc["steps"], layout, now, width)
    failures = doc.get("top_failures") or []
    if failures:
        lines += fold(Text(" " * _INDENT + "top failures:"), width)
        for failure in failures:
            item = Text.assemble(
                styled(f"{failure['count']}×", "red"), f" {visible(failure['reason'])}"
            )
            lines += pack([item], width, indent=_INDENT * 2)
    lines += pack(_schedule(doc, now), width, indent=_INDENT)
    lines += _notes(doc, width)
    return lines


def _progress(doc: dict[str, Any], now: datetime) -> list[Text]:
    totals = doc["totals"]
    items = [Text(f"{totals['sent']}/{sum(totals.values())} sent")]
    for state, title in _STATES:
        if state in _ALARMS and totals[state]:
            items.append(styled(f"{totals[state]} {title}", _ALARMS[state]))
    if totals["cancelled"]:
        items.append(Text(f"{totals['cancelled']} cancelled"))
    left = doc.get("left", 0)
    items.append(Text(f"{left} left"))
    rate = doc.get("rate_per_minute", 0.0)
    items.append(Text(f"{_rate(rate)}/min"))
    if left:
        eta = doc.get("eta")
        if eta is None:
            items.append(Text(f"ETA {_NONE}"))
        else:
            moment = datetime.fromisoformat(eta)
            shown = f"{moment:%H:%M}Z" if moment.date() == now.date() else utc_text(moment)
            items.append(Text(f"ETA {shown} (in {_duration(moment - now)})"))
    return items


def _schedule(doc: dict[str, Any], now: datetime) -> list[Text]:
    """Trigger facts and due work: only for a campaign with more than a launch, or work not
    yet due (a launch with everything due now has nothing to say here)."""
    due = doc["due"]
    waiting = any(due[bucket] for bucket, _ in _BUCKETS[1:])
    if doc["trigger"] == "launch" and not waiting:
        return []
    zone = doc["timezone"] or "UTC"
    items: list[Text] = []
    if doc["next_fire"] is not None:
        moment = datetime.fromisoformat(doc["next_fire"])
        fire = Text(f"next fire {both(moment, zone)}")
        if moment < now - _LATE:
            fire = Text.assemble(fire, " ", styled("overdue", "bold yellow"))
        items.append(fire)
    elif doc["trigger_ended"] is True:
        items.append(Text("next fire none (ended)"))
    elif doc["trigger_ended"] is False:
        items.append(Text("next fire unknown"))
    last = doc["last_occurrence"]
    shown = both(datetime.fromisoformat(last), zone) if last else _NONE
    items.append(Text(f"last occurrence {shown}"))
    buckets = [f"{due[bucket]} {title}" for bucket, title in _BUCKETS if due[bucket]]
    if buckets:
        items.append(Text("due " + ", ".join(buckets)))
    if doc["trigger"] == "enrollment":
        enrolled = doc["enrollments"]
        items.append(Text(f"enrolled {enrolled['active']} active / {sum(enrolled.values())}"))
    return items


def _notes(doc: dict[str, Any], width: int | None) -> list[Text]:
    name = visible(doc["name"])
    lines: list[Text] = []
    if doc["scheduler_note"]:
        note = Text.assemble(
            styled(f"⚠ {name}:", "bold yellow"), f" {visible(doc['scheduler_note'])}"
        )
        lines += pack([note], width, indent=_INDENT)
    if doc.get("pause_reason"):
        reason = Text.assemble(
            styled(f"⏸ {name}:", "bold red"),
            f" {visible(doc['pause_reason'])} — fix the cause, then `herald resume {name}`",
        )
        lines += pack([reason], width, indent=_INDENT)
    return lines


# ---------------------------------------------------------------------- the steps table


def _all_columns() -> tuple[_Column, ...]:
    return (
        *(_Column(state, title) for state, title in _STATES),
        _Column("rate", "/min"),
        _Column("eta", "ETA"),
    )


def _cells(step: dict[str, Any], now: datetime) -> dict[str, Text]:
    cells: dict[str, Text] = {"step": Text(visible(step["step"]))}
    for state, _ in _STATES:
        n = step["counts"][state]
        style = _ALARMS.get(state) if n else None
        cells[state] = styled(str(n), style) if style else Text(str(n))
    rate = step.get("rate_per_minute", 0.0)
    cells["rate"] = Text(_rate(rate) if rate else _NONE)
    eta = step.get("eta")
    cells["eta"] = Text(_duration(datetime.fromisoformat(eta) - now) if eta else _NONE)
    return cells


def _layout(documents: Sequence[dict[str, Any]], now: datetime, width: int | None) -> _Layout:
    rows = [_cells(step, now) for doc in documents for step in doc["steps"]]
    columns = _all_columns()
    natural = {c.key: max([len(c.title), *(row[c.key].cell_len for row in rows)]) for c in columns}
    natural["step"] = max([len("step"), *(row["step"].cell_len for row in rows)])
    if width is None:
        return _Layout(columns, natural, 2, (), stacked=False)
    step_least = min(natural["step"], _STEP_MIN)

    def room(shown: Sequence[_Column], gap: int) -> int:
        """Cells left for the step column."""
        return width - _INDENT - sum(natural[c.key] + gap for c in shown)

    for gap in (2, 1):
        if room(columns, gap) >= natural["step"]:
            return _Layout(columns, natural, gap, (), stacked=False)
    shown = list(columns)
    for key in _DROP_ORDER:
        if room(shown, 1) >= step_least:
            break
        shown = [c for c in shown if c.key != key]
    hidden = tuple(c.title for c in columns if c not in shown)
    if room(shown, 1) < step_least:
        return _Layout((), natural, 1, (), stacked=True)
    widths = dict(natural, step=min(natural["step"], room(shown, 1)))
    return _Layout(tuple(shown), widths, 1, hidden, stacked=False)


def _steps(
    steps: Sequence[dict[str, Any]], layout: _Layout, now: datetime, width: int | None
) -> list[Text]:
    if not steps:
        return []
    if layout.stacked:
        return _stacked(steps, now, width)
    gap = " " * layout.gap
    header = [pad(Text("step"), layout.widths["step"])]
    header += [pad(Text(c.title), layout.widths[c.key], right=c.right) for c in layout.columns]
    lines = [_row(header, gap, "dim")]
    for step in steps:
        cells = _cells(step, now)
        name = cells["step"]
        shortened = Text(middle(name.plain, layout.widths["step"]))
        row = [pad(shortened, layout.widths["step"])]
        row += [pad(cells[c.key], layout.widths[c.key], right=c.right) for c in layout.columns]
        lines.append(_row(row, gap, None))
    return lines


def _row(cells: Sequence[Text], gap: str, style: str | None) -> Text:
    line = Text.assemble(" " * _INDENT, Text(gap).join(cells))
    line.rstrip()
    if style:
        line.stylize(style)
    return line


def _stacked(steps: Sequence[dict[str, Any]], now: datetime, width: int | None) -> list[Text]:
    """One step per block: its name on its own line(s), whole; its counts packed below."""
    lines: list[Text] = []
    for step in steps:
        cells = _cells(step, now)
        lines += pack([styled(cells["step"].plain, "bold")], width, indent=_INDENT)
        items = [
            Text.assemble(cells[state], f" {title}")
            for state, title in _STATES
            if step["counts"][state] or state == "sent"
        ]
        if step.get("rate_per_minute"):
            items.append(Text(f"{cells['rate'].plain}/min"))
        if step.get("eta"):
            items.append(Text(f"ETA {cells['eta'].plain}"))
        lines += pack(items, width, indent=_INDENT * 2)
    return lines


# ---------------------------------------------------------------------- numbers


def _rate(per_minute: float) -> str:
    if per_minute >= 100:
        return f"{per_minute:.0f}"
    return f"{per_minute:.1f}".removesuffix(".0") if per_minute else "0"


def _duration(span: timedelta) -> str:
    """``<1m``, ``12m``, ``3h05m``, ``2d04h``: how long until an ETA."""
    minutes = int(span.total_seconds() // 60)
    if minutes < 1:
        return "<1m"
    if minutes < 60:
        return f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"
