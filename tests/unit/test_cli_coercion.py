"""herald/cli/coercion.py: where it converts an option's value itself, it returns exactly
what typer's pydantic conversion returns (value and type); everything else goes to typer."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from typer._coercion import TypeDescriptor, build_runtime_param
from typer.models import OptionInfo

from herald.cli.coercion import _UNSURE, plain_value
from herald.cli.log_options import LogFormatName, LogLevelName

TEXT = st.text(alphabet="0123456789-+._eE xa", max_size=10)
VALUES = st.one_of(
    TEXT,
    st.integers(-(10**16), 10**16),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
)
BOUND = st.one_of(st.none(), st.integers(-100, 100), st.floats(-100, 100))


def typers(annotation: Any, info: OptionInfo, value: Any) -> Any:
    param = build_runtime_param(TypeDescriptor(annotation, info, None))
    return param._coerce_value(value, param=None, ctx=None)  # type: ignore[arg-type]


@given(
    annotation=st.sampled_from([str, bool, int, float]),
    value=VALUES,
    low=BOUND,
    high=BOUND,
    clamp=st.booleans(),
)
def test_a_plain_value_is_what_typer_would_make_of_it(
    annotation: Any, value: Any, low: float | None, high: float | None, clamp: bool
) -> None:
    # A fractional bound on an int option is a declaration typer refuses to build (pydantic:
    # "'ge' must be coercible to an integer"), not a value a user could type.
    assume(annotation is not int or all(b is None or float(b).is_integer() for b in (low, high)))
    info = OptionInfo(min=low, max=high, clamp=clamp)
    plain = plain_value(annotation, info, value)
    if plain is not _UNSURE:
        expected = typers(annotation, info, value)
        assert (plain, type(plain)) == (expected, type(expected))


@given(
    annotation=st.sampled_from([LogLevelName, LogFormatName]),
    value=st.one_of(
        st.sampled_from([*LogLevelName, *LogFormatName]),
        st.sampled_from([m.value for m in [*LogLevelName, *LogFormatName]]),
        st.sampled_from(["INFO", "Json", " info", "info ", "", "warn"]),
        VALUES,
    ),
)
def test_a_plain_enum_value_is_what_typer_would_make_of_it(annotation: Any, value: Any) -> None:
    plain = plain_value(annotation, OptionInfo(), value)
    if plain is not _UNSURE:
        expected = typers(annotation, OptionInfo(), value)
        assert (plain, type(plain)) == (expected, type(expected))


@pytest.mark.parametrize(
    ("annotation", "value", "expected"),
    [
        (str, "sqlite:///herald.db", "sqlite:///herald.db"),
        (int, "20", 20),
        (int, -3, -3),
        (float, "0.5", 0.5),
        (float, 2, 2.0),
        (float, 2.0, 2.0),
        (bool, True, True),
        (LogLevelName, "debug", LogLevelName.debug),
        (LogLevelName, LogLevelName.info, LogLevelName.info),
        (LogFormatName, "json", LogFormatName.json),
    ],
)
def test_the_common_values_are_plain(annotation: Any, value: Any, expected: Any) -> None:
    plain = plain_value(annotation, OptionInfo(), value)
    assert (plain, type(plain)) == (expected, type(expected))


@pytest.mark.parametrize(
    ("annotation", "value", "info"),
    [
        (int, "020", OptionInfo()),  # a spelling left to pydantic
        (int, "1_000", OptionInfo()),
        (int, " 7", OptionInfo()),
        (float, "1e3", OptionInfo()),
        (float, float("inf"), OptionInfo()),
        (int, True, OptionInfo()),
        (int, "5", OptionInfo(min=20)),  # out of range: typer's message
        (float, "0.05", OptionInfo(min=0.1, clamp=True)),  # typer clamps it
        (str, 5, OptionInfo()),
        (bool, "yes", OptionInfo()),
        (str, "x", OptionInfo(parser=str.upper)),
        (LogLevelName, "INFO", OptionInfo()),  # a spelling left to typer (and pydantic)
        (LogLevelName, LogFormatName.json, OptionInfo()),  # another enum's member
        (LogLevelName, 1, OptionInfo()),
    ],
)
def test_anything_else_is_left_to_typer(annotation: Any, value: Any, info: OptionInfo) -> None:
    assert plain_value(annotation, info, value) is _UNSURE
