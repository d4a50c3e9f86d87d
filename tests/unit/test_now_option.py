"""``--now`` / ``HERALD_NOW``: parsed in one place (herald.app.clock); a bad value is invalid
input (exit 2) with one line and a hint, whichever read-only command it was given to."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from herald.app.clock import clock_from, parse_now
from herald.app.common import utc_now
from herald.errors import UsageError
from tests.support.factories import invoke


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-12-07T09:00:00Z", datetime(2026, 12, 7, 9, 0, tzinfo=UTC)),
        ("2026-12-07T09:00", datetime(2026, 12, 7, 9, 0, tzinfo=UTC)),  # naive = UTC
        ("2026-12-07 09:00", datetime(2026, 12, 7, 9, 0, tzinfo=UTC)),
        ("2026-12-07", datetime(2026, 12, 7, tzinfo=UTC)),
        ("2026-12-07T10:00+01:00", datetime(2026, 12, 7, 9, 0, tzinfo=UTC)),
        ("2026-03-29T03:30:00+02:00", datetime(2026, 3, 29, 1, 30, tzinfo=UTC)),
        ("  2026-12-07T09:00Z ", datetime(2026, 12, 7, 9, 0, tzinfo=UTC)),
    ],
)
def test_iso_forms(text: str, expected: datetime) -> None:
    parsed = parse_now(text)
    assert parsed == expected
    assert parsed.tzinfo is UTC


@pytest.mark.parametrize(
    "text",
    ["", "tomorrow", "2026-13-01", "2026-12-07T25:00", "9:00", "1e9", "0001-01-01T00:00+01:00"],
)
def test_bad_values_are_usage_errors(text: str) -> None:
    with pytest.raises(UsageError) as raised:
        parse_now(text)
    assert "--now/HERALD_NOW" in raised.value.message
    assert raised.value.hint is not None
    assert "ISO-8601" in raised.value.hint


@given(
    st.datetimes(
        min_value=datetime(1971, 1, 1),
        max_value=datetime(9998, 1, 1),
        timezones=st.sampled_from(
            [UTC, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-8))]
        ),
    )
)
def test_any_aware_iso_text_is_the_same_instant(moment: datetime) -> None:
    assert parse_now(moment.isoformat()) == moment


def test_the_real_clock_unless_asked() -> None:
    assert clock_from(None) is utc_now
    fixed = clock_from("2026-12-07T09:00Z")
    assert fixed() == fixed() == datetime(2026, 12, 7, 9, tzinfo=UTC)


@pytest.mark.parametrize(
    "args",
    [
        ("status", "--database-url", "sqlite:///{tmp}/db.sqlite"),
        ("validate", "{tmp}/nothing.yaml"),
        ("schedule", "{tmp}/nothing.yaml"),
        ("plan", "{tmp}/nothing.yaml"),
        ("simulate", "{tmp}/nothing.yaml", "--until", "30d"),
    ],
)
@pytest.mark.parametrize("how", ["option", "env"])
def test_a_bad_now_exits_2_with_one_line(args: tuple[str, ...], how: str, tmp_path: Path) -> None:
    filled = [arg.format(tmp=tmp_path) for arg in args]
    if how == "option":
        result = invoke(*filled, "--now", "next tuesday")
    else:
        result = invoke(*filled, env={"HERALD_NOW": "next tuesday"})
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert lines[0] == "error: invalid --now/HERALD_NOW value 'next tuesday'"
    assert lines[1].strip().startswith("hint:")
    assert len(lines) == 2
    assert not any(tmp_path.iterdir())  # refused before any file is opened


def test_validate_takes_now(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        'name: c\nfrom: "A <a@x.example>"\naudience: [b@example.com]\n'
        'steps:\n  - {id: hi, subject: "Hi", text: "x"}\n'
    )
    result = invoke("validate", str(path), "--now", "2026-12-07T09:00+01:00")
    assert result.exit_code == 0, result.output
    assert "ok: c: 1 recipient(s)" in result.output
