"""``herald status --watch`` in-process (herald.cli.status_screen): snapshots piped after
separators or JSON Lines, a terminal redrawn in place, Ctrl-C as a normal end, and a database
that stops answering mid-watch shown as such without ending the watch."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

import pytest
from rich.console import Console
from sqlalchemy.exc import OperationalError

from herald.cli.status_screen import watch_status
from herald.output import LiteralConsole
from tests.unit.test_status_view import fixed_snapshot


def series(*outcomes: BaseException | None) -> Callable[[], dict[str, Any]]:
    """A ``take`` that gives the fixed snapshot (sent = call number) or raises, in turn."""
    calls = iter(outcomes)

    def take() -> dict[str, Any]:
        outcome = next(calls)
        if outcome is not None:
            raise outcome
        snapshot = fixed_snapshot()
        snapshot["totals"]["sent"] = take.calls  # type: ignore[attr-defined]
        take.calls += 1  # type: ignore[attr-defined]
        return snapshot

    take.calls = 0  # type: ignore[attr-defined]
    return take


def down() -> OperationalError:
    return OperationalError("select", {}, Exception("connection refused\nsecond line"))


def piped(width: int = 80) -> tuple[Console, io.StringIO]:
    buffer = io.StringIO()
    return LiteralConsole(file=buffer, width=width, no_color=True), buffer


def test_piped_snapshots_follow_separators() -> None:
    console, buffer = piped()
    watch_status(console, series(None, None), interval=0.01, count=2, as_json=False, width=60)
    text = buffer.getvalue()
    assert text.count("--- herald status 2026-12-07 09:00Z ---") == 2
    assert "herald status · 2026-12-07 09:00Z · 3 campaigns · 0 sent" in text
    assert "· 1 sent" in text
    assert all(len(line) <= 60 for line in text.splitlines())


def test_json_watch_writes_one_document_per_line() -> None:
    console, buffer = piped()
    watch_status(
        console, series(None, None, None), interval=0.01, count=3, as_json=True, width=None
    )
    documents = [json.loads(line) for line in buffer.getvalue().splitlines()]
    assert [d["totals"]["sent"] for d in documents] == [0, 1, 2]


def test_an_unanswering_database_mid_watch_is_said_and_the_watch_goes_on(
    capsys: pytest.CaptureFixture[str],
) -> None:
    console, buffer = piped()
    take = series(None, down(), None)
    watch_status(console, take, interval=0.01, count=3, as_json=False, width=None)
    assert buffer.getvalue().count("--- herald status") == 2  # the one that failed is skipped
    stderr = capsys.readouterr().err
    assert "not refreshed, the database did not answer: connection refused" in stderr
    assert "second line" not in stderr


def test_the_first_snapshot_must_succeed() -> None:
    console, _ = piped()
    with pytest.raises(OperationalError):
        watch_status(console, series(down()), interval=0.01, count=2, as_json=False, width=None)


def test_ctrl_c_ends_the_watch_normally() -> None:
    console, buffer = piped()
    watch_status(
        console, series(None, KeyboardInterrupt()), interval=0.01, count=None, as_json=False,
        width=None,
    )  # fmt: skip
    assert buffer.getvalue().count("--- herald status") == 1


def test_a_terminal_is_redrawn_in_place_with_the_last_screen_when_stale() -> None:
    buffer = io.StringIO()
    console = LiteralConsole(file=buffer, width=70, height=60, force_terminal=True)
    watch_status(console, series(None, down()), interval=0.01, count=2, as_json=False, width=None)
    text = buffer.getvalue()
    assert "--- herald status" not in text
    assert "\x1b[" in text  # cursor movement and colour: a terminal's screen
    assert text.count("\x1b[1mherald status\x1b[0m · 2026-12-07 09:00Z") >= 2  # drawn, redrawn
    assert "not refreshed, the database did not answer: connection refused" in text
