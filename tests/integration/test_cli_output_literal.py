"""Issue 7 item 6: text from data or servers is printed literally by every CLI output path.

Hypothesis generates hostile text (Rich markup such as ``[/]``, ``[red]``, ``[link=...]``,
``[conceal]``, emoji codes, control characters, bidi overrides, very long values) and pushes it
through the consoles themselves and through the real commands that print it: ``validate`` /
``launch`` (problem lines), ``audience check``, ``dead list`` and ``in-doubt list``
(addresses and server replies in tables). The text must never raise, never disappear, and be
shown as ``visible(text)``: itself, with only control characters replaced by escapes.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from rich.table import Table
from sqlalchemy.engine import Engine

from dispatch.states import State
from dispatch.store import Completion
from herald.output import LiteralConsole, visible
from tests.support.examples import examples
from tests.support.factories import complete, in_doubt, invoke, sending

MARKUP = st.sampled_from(
    [
        "[/]",
        "[red]",
        "[/red]",
        "[conceal]",
        "[link=https://evil.example]",
        "[bold red on white]",
        ":smile:",
        "\\[",
        "[",
        "]",
        "\x1b[2J",
        "\x1b]8;;https://evil.example\x07",
        "\r",
        "\n",
        "\x00",
        "\u202e",
        "\x85",
        "\t",
    ]
)
HOSTILE = (
    st.lists(st.one_of(MARKUP, st.text(max_size=12)), min_size=1, max_size=12)
    .map("".join)
    .filter(lambda text: text.strip() != "")
)
_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _shown(text: str, output: str) -> None:
    assert "Traceback" not in output
    assert "MarkupError" not in output
    assert visible(text) in output, (text, output)
    assert not _CONTROL.search(output), repr(output)


# --- the consoles themselves -------------------------------------------------------------------


@given(text=HOSTILE)
@settings(max_examples=examples(300), deadline=None)
def test_any_text_prints_literally_even_when_markup_is_asked_for(text: str) -> None:
    buffer = io.StringIO()
    console = LiteralConsole(file=buffer, width=100_000, soft_wrap=True)
    console.print(text, markup=True, emoji=True)
    table = Table()
    table.add_column("value")
    table.add_row(text)
    console.print(table)
    output = buffer.getvalue()
    assert output.count(visible(text)) >= 2, (text, output)
    assert not _CONTROL.search(output)


def test_very_long_values_are_neither_wrapped_nor_cut() -> None:
    text = "[red]" + "x" * 50_000 + "[/]"
    buffer = io.StringIO()
    console = LiteralConsole(file=buffer, width=100_000, soft_wrap=True)
    table = Table()
    table.add_column("value")
    table.add_row(text)
    console.print(table)
    assert text in buffer.getvalue()


def test_visible_only_escapes_what_a_terminal_would_act_on() -> None:
    assert visible("[/] [red]x:smile:ü") == "[/] [red]x:smile:ü"
    assert visible("a\x1b[2Jb\r\nc\u202e") == "a\\x1b[2Jb\\r\\nc\\u202e"


# --- through the real commands -----------------------------------------------------------------


def _csv(folder: Path, rows: list[tuple[str, str]]) -> None:
    with (folder / "people.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["email", "name"])
        writer.writerows(rows)


def _campaign(folder: Path, subject: str = "Hi {{ name }}") -> Path:
    path = folder / "campaign.yaml"
    path.write_text(
        'name: lit\nfrom: "Herald <news@herald.test>"\naudience: people.csv\n'
        f"steps:\n  - id: welcome\n    subject: '{subject}'\n    text: hello\n",
        encoding="utf-8",
    )
    return path


@pytest.mark.parametrize(
    "address", ["[/]", "x@[/red][conceal]hidden", "[/]@example.com", "[link=x]a@b.example"]
)
def test_markup_in_addresses_makes_no_traceback(tmp_path: Path, address: str) -> None:
    """The reported defect: `[/]` gave exit 1 with a MarkupError; `[conceal]` hid text."""
    _csv(tmp_path, [(address, "Ann")])
    path = _campaign(tmp_path)
    for args in (["validate", str(path)], ["launch", str(path), "--database-url", "sqlite://"]):
        result = invoke(*args)
        assert result.exit_code == 2, result.output
        assert "Traceback" not in result.output
        assert address in result.output, result.output


@given(value=HOSTILE)
@settings(
    max_examples=examples(60),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
def test_validate_and_audience_check_show_rows_literally(tmp_path: Path, value: str) -> None:
    """A bad address is quoted as a repr excerpt; a name that breaks a render is shown in the
    problem line as the renderer quotes it. Either way: never raises, shown as it is."""
    _csv(tmp_path, [(f"{value}@@example.com", "n")])
    path = _campaign(tmp_path)
    for args in (["validate", str(path)], ["audience", "check", str(tmp_path / "people.csv")]):
        result = invoke(*args)
        assert result.exit_code == 2, result.output
        assert "invalid address" in result.output
        assert "Traceback" not in result.output
        assert not _CONTROL.search(result.output), repr(result.output)


def test_audience_check_source_name_is_literal(tmp_path: Path) -> None:
    name = "[red]x[conceal]y\x1b[2J:smile:.csv"
    (tmp_path / name).write_text("email\nann@example.com\n")
    result = invoke("audience", "check", str(tmp_path / name))
    assert result.exit_code == 0, result.output
    _shown(str(tmp_path / name), result.output)


_jobs = 0


def _next_name() -> str:
    global _jobs
    _jobs += 1
    return f"job{_jobs}"


# NUL included: PostgreSQL text cannot hold it, so the store keeps it as the escape "\\x00"
# (dbtypes.ForeignText), and the listing shows that escape.
@given(reason=HOSTILE)
@example(reason="550 relay\x00said [/] no")
@settings(
    max_examples=examples(12),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
def test_dead_and_in_doubt_lists_show_server_text_literally(
    engine: Engine, db_url: str, reason: str
) -> None:
    failed = sending(engine, _next_name())
    complete(engine, Completion(failed.lease, State.FAILED, code=550, text=reason))
    dead = invoke("dead", "list", "--database-url", db_url)
    assert dead.exit_code == 0, dead.output
    _shown(reason, dead.output)
    in_doubt(engine, _next_name(), reason=reason)
    doubt = invoke("in-doubt", "list", "--database-url", db_url)
    assert doubt.exit_code == 0, doubt.output
    _shown(reason, doubt.output)
