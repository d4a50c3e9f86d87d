"""Whatever a configuration file holds, reading it ends in variables the environment can hold
or one ConfigError, never another exception (a traceback) and never a value in the message."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import typer.main
from hypothesis import given, settings
from hypothesis import strategies as st

from herald.cli import app
from herald.config import read
from herald.config_names import Setting, known_settings
from herald.errors import ConfigError
from tests.support.examples import examples

KNOWN: Mapping[str, Setting] = known_settings(typer.main.get_command(app))
NAMES = sorted({setting.name for setting in KNOWN.values()})
MARK = "VALUE-MARK-"  # every generated string value starts with it: never in a message

KEYS = st.one_of(
    st.sampled_from([name.rpartition(".")[2] for name in NAMES]),
    st.sampled_from(["secret", "worker", "in-doubt", "dkim", "a=b", "x y", "crm_token"]),
    st.text(min_size=1, max_size=12),
)
SCALARS = st.one_of(
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=20).map(lambda s: MARK + s),
    st.datetimes(),
)
VALUES = st.one_of(SCALARS, st.lists(SCALARS, max_size=3))
DOCUMENTS: st.SearchStrategy[dict[str, Any]] = st.recursive(
    st.dictionaries(KEYS, VALUES, max_size=4),
    lambda tables: st.dictionaries(KEYS, st.one_of(VALUES, tables), max_size=3),
    max_leaves=12,
)


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)  # nan, inf and -inf are TOML too
    if isinstance(value, str):
        return json.dumps(value)  # JSON's escapes are TOML's (\uXXXX included)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    return str(value.isoformat())  # a local date-time


def toml_lines(table: dict[str, Any], path: tuple[str, ...]) -> Iterator[str]:
    scalars = {k: v for k, v in table.items() if not isinstance(v, dict)}
    tables = {k: v for k, v in table.items() if isinstance(v, dict)}
    if path:
        yield "[" + ".".join(json.dumps(part) for part in path) + "]"
    for key, value in scalars.items():
        yield f"{json.dumps(key)} = {toml_value(value)}"
    for key, value in tables.items():
        yield from toml_lines(value, (*path, key))


def check(content: bytes) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "herald.toml"
        path.write_bytes(content)
        try:
            values = read(path, KNOWN)
        except ConfigError as exc:
            assert str(path) in exc.message
            assert MARK not in exc.message
            assert "\n" not in exc.message
            return
    for env, value in values.items():
        assert env in KNOWN or env.startswith("HERALD_SECRET_")
        os.environ[env] = value  # the environment can hold it (no NUL, no "=" in the name)
        del os.environ[env]


@settings(max_examples=examples(300), deadline=None)
@given(DOCUMENTS)
def test_any_document(document: dict[str, Any]) -> None:
    check("\n".join(toml_lines(document, ())).encode())


@settings(max_examples=examples(200), deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes(content: bytes) -> None:
    check(content)


@pytest.mark.parametrize(
    "content",
    [
        b'[secret]\n"a=b" = "x"\n',
        b'operator = "a\\u0000b"\n',
        b"\xff\xfe = 1\n",
        b"[worker]\nconcurrency = 1979-05-27T07:32:00\n",
        b"[worker]\n[worker]\n",
    ],
)
def test_known_traps(content: bytes) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "herald.toml"
        path.write_bytes(content)
        with pytest.raises(ConfigError):
            read(path, KNOWN)
