"""The screen of ``herald status`` (herald.cli.status_view), from a fixed snapshot: compared with
the committed snapshots at 60, 80 and 160 columns, and, for hostile names at any width, every
line fits, nothing is read as markup or control, and every campaign is there.

Regenerate the committed snapshots after an intended change of layout with
``HERALD_UPDATE_SNAPSHOTS=1 .venv/bin/pytest tests/unit/test_status_view.py`` and review the diff.
"""

from __future__ import annotations

import copy
import io
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.cells import cell_len

from herald.cli.status_screen import render
from herald.cli.status_view import status_lines
from herald.output import _INVISIBLE, LiteralConsole, visible
from tests.support.examples import examples

SNAPSHOTS = Path(__file__).parent.parent / "snapshots"
UPDATE = os.environ.get("HERALD_UPDATE_SNAPSHOTS") == "1"
NOW = "2026-12-07T09:00:00+00:00"
STATES = ("pending", "claimed", "sending", "sent", "failed", "cancelled", "in_doubt")


def counts(**given: int) -> dict[str, int]:
    return {state: given.get(state, 0) for state in STATES}


def step(name: str, rate: float = 0.0, eta: str | None = None, **given: int) -> dict[str, Any]:
    c = counts(**given)
    left = c["pending"] + c["claimed"] + c["sending"]
    return {
        "step": name,
        "total": sum(c.values()),
        "counts": c,
        "left": left,
        "rate_per_minute": rate,
        "eta": eta,
    }


def campaign(name: str, steps: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    totals = counts()
    for s in steps:
        for state, n in s["counts"].items():
            totals[state] += n
    doc: dict[str, Any] = {
        "name": name,
        "status": "active",
        "version": 1,
        "launched_at": "2026-12-07T08:30:00+00:00",
        "trigger": "launch",
        "timezone": None,
        "next_fire": None,
        "next_fire_local": None,
        "trigger_ended": None,
        "last_occurrence": "2026-12-07T08:30:00+00:00",
        "fires": {"due": 0, "done": 0, "skipped": 0},
        "enrollments": {"active": 0, "left": 0, "ended": 0, "done": 0},
        "due": {"now": 0, "within_1h": 0, "within_24h": 0, "within_7d": 0, "later": 0},
        "scheduler_note": None,
        "pause_reason": None,
        "steps": steps,
        "totals": totals,
        "left": sum(s["left"] for s in steps),
        "rate_per_minute": sum(s["rate_per_minute"] for s in steps),
        "eta": None,
        "top_failures": [],
    }
    doc.update(fields)
    return doc


def snapshot(documents: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    totals = counts()
    for doc in documents:
        for state, n in doc["totals"].items():
            totals[state] += n
    result: dict[str, Any] = {
        "now": NOW,
        "campaigns": documents,
        "totals": totals,
        "due": {"now": 0, "within_1h": 0, "within_24h": 0, "within_7d": 0, "later": 0},
        "in_doubt": totals["in_doubt"],
        "failed": totals["failed"],
        "left": sum(doc["left"] for doc in documents),
        "rate_per_minute": sum(doc["rate_per_minute"] for doc in documents),
        "eta": None,
        "rate_window_minutes": 10,
        "relays": [],
    }
    result.update(fields)
    return result


def fixed_snapshot() -> dict[str, Any]:
    """Three campaigns an operator might see at once: one sending, one paused by its error
    brake with long names, one weekly schedule in Berlin; and a relay down."""
    sending = campaign(
        "onboarding",
        [
            step("welcome", 42.5, "2026-12-07T09:12:00+00:00", pending=480, sent=1500, failed=3),
            step("tips", 12.0, "2026-12-07T11:05:00+00:00", pending=1500, claimed=8, sent=475),
            step("later", pending=1983),
        ],
        eta="2026-12-07T11:05:00+00:00",
        top_failures=[
            {"reason": "550 5.1.1 <address>: Recipient address rejected: User unknown", "count": 2},
            {"reason": "554 5.7.1 Message refused", "count": 1},
        ],
    )
    sending["in_doubt"] = 0
    braked = campaign(
        "spring-sale-2026-reactivation-europe-customers-who-bought-twice",
        [
            step("first-reminder-for-people-who-opened-but-did-not-click", failed=20, sent=0),
            step("second", pending=380, cancelled=4, in_doubt=1),
        ],
        status="paused",
        pause_reason="paused automatically: 20 of the last 20 sends failed permanently "
        "(most common: 550 DATA: 5.7.1 Message refused)",
        top_failures=[{"reason": "550 5.7.1 Message refused (injected fault)", "count": 20}],
    )
    weekly = campaign(
        "weekly-digest",
        [step("digest", sent=2)],
        status="completed",
        trigger="schedule",
        timezone="Europe/Berlin",
        next_fire="2026-12-13T08:00:00+00:00",
        next_fire_local="2026-12-13T09:00:00+01:00",
        trigger_ended=False,
        last_occurrence="2026-12-06T08:00:00+00:00",
    )
    return snapshot(
        [sending, braked, weekly],
        relays=[
            {
                "relay": "smtp://mail.example.net:587",
                "state": "unreachable",
                "since": "2026-12-07T08:58:00+00:00",
                "last_error": "connection refused",
                "worker": "host-1:4242",
                "updated_at": NOW,
            }
        ],
    )


def plain(lines: list[Any]) -> str:
    return "".join(f"{line.plain}\n" for line in lines)


@pytest.mark.parametrize("width", [60, 80, 160])
def test_the_screen_matches_the_committed_snapshot(width: int) -> None:
    shown = plain(status_lines(fixed_snapshot(), width))
    path = SNAPSHOTS / f"status_{width}.txt"
    if UPDATE:
        path.parent.mkdir(exist_ok=True)
        path.write_text(shown, encoding="utf-8")
    assert shown == path.read_text(encoding="utf-8"), f"{path} differs (see module docstring)"
    assert all(cell_len(line) <= width for line in shown.splitlines())


def test_steps_keep_the_snapshots_order_and_short_names_stay_whole() -> None:
    shown = plain(status_lines(fixed_snapshot(), 80))
    rows = [
        line.split()[0] for line in shown.splitlines() if line.startswith("  ") and line[2:3] != " "
    ]
    assert [r for r in rows if r in ("welcome", "tips", "later")] == ["welcome", "tips", "later"]


def test_a_long_step_name_is_shortened_in_the_middle_never_at_the_end() -> None:
    shown = plain(status_lines(fixed_snapshot(), 60))
    (row,) = [line for line in shown.splitlines() if "…" in line and "fir" in line]
    assert row.split()[0].startswith("fir")
    assert row.split()[0].endswith("ick")
    assert "first-…click" in plain(status_lines(fixed_snapshot(), 80))
    # Campaign names are wrapped instead: every character is still on the screen.
    name = "spring-sale-2026-reactivation-europe-customers-who-bought-twice"
    assert name in "".join(shown.split())


def test_piped_output_is_never_shortened() -> None:
    shown = plain(status_lines(fixed_snapshot(), None))
    assert "first-reminder-for-people-who-opened-but-did-not-click" in shown
    assert "…" not in shown.replace("(most common", "")
    assert "not shown" not in shown


def test_narrow_screens_say_which_columns_they_left_out() -> None:
    shown = plain(status_lines(fixed_snapshot(), 60))
    assert "claimed, sending not shown" in " ".join(shown.split())
    wide = plain(status_lines(fixed_snapshot(), 160))
    assert "not shown" not in wide
    assert " claimed " in wide


def test_very_narrow_screens_stack_each_step() -> None:
    data = fixed_snapshot()
    data["campaigns"][0]["steps"][0]["counts"]["sent"] = 1_000_000_000_000  # a wide column
    lines = plain(status_lines(data, 24)).splitlines()
    assert all(cell_len(line) <= 24 for line in lines)
    assert "  welcome" in lines
    assert any("1000000000000 sent" in line for line in lines)


def test_no_campaigns() -> None:
    shown = plain(status_lines(snapshot([]), 80))
    assert "no campaigns yet" in shown


# ---------------------------------------------------------------------- hostile names

NAMES = st.one_of(
    st.text(min_size=1, max_size=80),
    st.sampled_from(
        [
            "[bold]loud[/bold]",
            "[/]",
            "[link=https://evil.example]x[/link]",
            ":smile: :warning:",
            "\x1b[31mred\x1b[0m",
            "evil\u202eredro",
            "line\nbreak\rcarriage\ttab",
            "日本語のキャンペーン名前がとても長い場合のテスト" * 2,
            "👩‍👩‍👧‍👦 family 🇪🇺 flag",
            "e\u0301\u0301\u0301 combining",
            "x" * 200,
            "a b c d e f g h i j k l m n o p q r s t u v w x y z" * 3,
        ]
    ),
)


@st.composite
def hostile_snapshots(draw: st.DrawFn) -> dict[str, Any]:
    names = draw(st.lists(NAMES, min_size=1, max_size=4, unique=True))
    documents = []
    for name in names:
        step_names = draw(st.lists(NAMES, min_size=1, max_size=3, unique=True))
        steps = [
            step(
                s,
                draw(st.floats(0, 10_000)),
                draw(
                    st.sampled_from(
                        [None, "2026-12-07T09:00:30+00:00", "2027-03-01T00:00:00+00:00"]
                    )
                ),
                pending=draw(st.integers(0, 10**9)),
                failed=draw(st.integers(0, 10**6)),
                in_doubt=draw(st.integers(0, 3)),
            )
            for s in step_names
        ]
        reason = draw(NAMES)
        documents.append(
            campaign(
                name,
                steps,
                status=draw(st.sampled_from(["active", "paused", "completed", "cancelled"])),
                scheduler_note=draw(st.one_of(st.none(), NAMES)),
                pause_reason=draw(st.one_of(st.none(), NAMES)),
                top_failures=[{"reason": reason, "count": 7}],
            )
        )
    return snapshot(documents)


def squeezed(text: str) -> str:
    return "".join(text.split())


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=hostile_snapshots(), width=st.integers(20, 200))
def test_hostile_names_fit_any_width_literally(data: dict[str, Any], width: int) -> None:
    buffer = io.StringIO()
    console = LiteralConsole(file=buffer, width=width, no_color=True)
    render(console, data, width=width)
    output = buffer.getvalue()
    lines = output.splitlines()
    assert all(cell_len(line) <= width for line in lines), [
        (cell_len(line), line) for line in lines if cell_len(line) > width
    ]
    # Nothing the data carries reaches the terminal as a control: only our newlines do.
    assert not {ord(ch) for ch in output.replace("\n", "")} & _INVISIBLE
    # Every campaign is there, whole and literally (markup, emoji codes, escapes as written),
    # if perhaps across lines; so is every failure reason.
    flat = squeezed(output)
    for doc in data["campaigns"]:
        assert squeezed(visible(doc["name"])) in flat
        assert squeezed(visible(doc["top_failures"][0]["reason"])) in flat
        for s in doc["steps"]:
            shown = squeezed(visible(s["step"]))
            # A step name is whole, or shortened around … (in a table cell, never elsewhere).
            assert shown in flat or "…" in flat


@settings(max_examples=examples(50), deadline=None)
@given(data=hostile_snapshots())
def test_piped_every_step_name_is_whole(data: dict[str, Any]) -> None:
    lines = [line.plain for line in status_lines(copy.deepcopy(data), None)]
    for doc in data["campaigns"]:
        for s in doc["steps"]:
            assert any(visible(s["step"]) in line for line in lines)
