"""Audience data formats read incrementally: JSON arrays element by element, NDJSON, CSV."""

from __future__ import annotations

import io
import json

import pytest

from campaigns.audience_formats import (
    MAX_RECORD_CHARS,
    Recipient,
    RowProblem,
    iter_json_array,
    iter_ndjson,
    parse_stream,
    recipient_from_record,
)
from campaigns.errors import AudienceError


class Trickle(io.StringIO):
    """Hands out at most three characters per read: every token boundary gets split."""

    def read(self, size: int | None = -1, /) -> str:
        return super().read(3 if size is None or size < 0 else min(size, 3))


def rows(text: str, *, trickle: bool = True) -> list[Recipient | RowProblem]:
    stream = Trickle(text) if trickle else io.StringIO(text)
    return list(iter_json_array(stream, "people.json"))


def test_elements_split_across_reads_parse_the_same() -> None:
    people = [
        {"email": "a@example.com", "note": 'has "quotes", [brackets] and {braces}', "n": 12345},
        {"email": "b@example.com", "tags": "x\\u00e9y", "ok": False, "score": -1.5e3},
        {"email": "c@example.com", "name": "Ünïcødé"},
    ]
    text = json.dumps(people, indent=1)
    assert rows(text) == rows(text, trickle=False)
    first, second, third = rows(text)
    assert isinstance(first, Recipient)
    assert first.variables["n"] == "12345"
    assert first.variables["note"] == 'has "quotes", [brackets] and {braces}'
    assert isinstance(second, Recipient)
    assert second.variables["score"] == "-1500.0"
    assert second.variables["ok"] == "false"
    assert isinstance(third, Recipient)
    assert (third.name, third.line, third.unit) == (
        "Ünïcødé",
        3,
        "element",
    )


def test_empty_array_and_whitespace() -> None:
    assert rows("  [ \n ]  \n") == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"email": "a@example.com"}', "expected a JSON array of objects"),
        ("", "expected a JSON array of objects"),
        ('[{"email": "a@example.com"}] x', "unexpected data after the end of the JSON array"),
        ('[{"email": "a@example.com"} {"email": "b@example.com"}]', "element 1: expected ','"),
        ('[{"email": "a@example.com"}, {"email": ]', "element 2: invalid JSON"),
        ('[{"email": "a@example.com"}, {"email": "b@ex', "element 2: invalid JSON"),
        ('[{"email": "a@example.com"}', "element 1: expected ',' or ']'"),
    ],
)
def test_broken_syntax_stops_with_the_element(text: str, message: str) -> None:
    with pytest.raises(AudienceError, match=message.replace("[", r"\[")):
        rows(text)


def test_a_syntax_error_early_in_a_large_array_is_reported_at_once() -> None:
    good = ",".join(json.dumps({"email": f"u{i}@example.com"}) for i in range(50_000))
    text = '[{"email": nope},' + good + "]"
    with pytest.raises(AudienceError, match="element 1: invalid JSON: Expecting value"):
        rows(text, trickle=False)


def test_an_oversized_element_is_refused() -> None:
    huge = json.dumps([{"email": "a@example.com", "blob": "x" * (MAX_RECORD_CHARS + 10)}])
    with pytest.raises(AudienceError, match="element 1: element is longer than"):
        rows(huge, trickle=False)


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        ({"name": "Ann"}, "no 'email' key"),
        ({"email": ""}, "email is empty"),
        ({"email": 42}, "email must be text"),
        ({"email": "bob@"}, "invalid address 'bob@': domain is empty"),
        ({"email": "a@example.com", "Email": "b@example.com"}, "both mean 'email'"),
        ({"email": "a@example.com", "name": "A\nB"}, "header injection: line break in name"),
        ({"email": "a@example.com", "address": {"city": "X"}}, "field 'address' must be a plain"),
        ([1, 2], "expected an object with an 'email' key, got a list"),
        (7, "expected an object with an 'email' key, got int value"),
    ],
)
def test_record_rules(record: object, reason: str) -> None:
    problem = recipient_from_record(record, 4, "element")
    assert isinstance(problem, RowProblem)
    assert (problem.line, problem.unit, problem.where) == (4, "element", "element 4")
    assert reason in problem.reason


def test_ndjson_lines_blank_lines_and_bad_json() -> None:
    text = '{"email":"a@example.com"}\r\n\r\n  \n{"email":\n[1]\n{"email":"d@example.com"}'
    result = list(iter_ndjson(io.StringIO(text, newline=None), "p.ndjson"))
    assert [(type(r).__name__, r.where) for r in result] == [
        ("Recipient", "line 1"),
        ("RowProblem", "line 4"),
        ("RowProblem", "line 5"),
        ("Recipient", "line 6"),
    ]


def test_ndjson_line_length_is_capped() -> None:
    text = '{"email": "a@example.com", "x": "' + "y" * MAX_RECORD_CHARS + '"}\n'
    with pytest.raises(AudienceError, match="line is longer than"):
        list(iter_ndjson(io.StringIO(text), "p.ndjson"))


def test_csv_from_a_stream_keeps_quoted_line_breaks() -> None:
    text = 'email,note\r\na@example.com,"two\r\nlines"\r\nb@,x\r\n'
    result = list(parse_stream("csv", io.StringIO(text, newline=""), source="u"))
    assert result == [
        Recipient("a@example.com", None, {"email": "a@example.com", "note": "two\r\nlines"}, 2),
        RowProblem(4, "invalid address 'b@': domain is empty"),
    ]
