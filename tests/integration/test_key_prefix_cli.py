"""Operator commands take a key only when it names exactly one job (issue 7, item 11).

An empty or short prefix used to match every job: ``in-doubt resolve "" --as failed`` resolved
one. Every command taking keys goes through one rule (dispatch.key_lookup): 8 to 64 hex
characters, any case, matching exactly one job. Through the real CLI, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
import re

import pytest
import sqlalchemy as sa
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy.engine import Engine

from dispatch.key_lookup import KeyPrefixError, normalise_prefix
from dispatch.models import send_event, send_job
from dispatch.states import State
from dispatch.store import Completion
from tests.support.factories import cli, complete, sending

J = send_job.c
SHARED = "abcdef01"  # the first 8 characters of two keys below


def make_job(engine: Engine, key: str, target: State) -> str:
    """Enqueue a job with this exact key and take it to ``target`` (in_doubt or failed)."""
    job = sending(engine, key[:8], key=key)
    done = Completion(job.lease, target, code=550, text="x", in_doubt_reason="timeout")
    complete(engine, done)
    return key


@pytest.fixture
def keys(engine: Engine) -> dict[str, str]:
    return {
        "doubt1": make_job(engine, SHARED + "1" * 56, State.IN_DOUBT),
        "doubt2": make_job(engine, SHARED + "2" * 56, State.IN_DOUBT),
        "dead1": make_job(engine, "0123456789" + "a" * 54, State.FAILED),
    }


def snapshot(engine: Engine) -> tuple[list[tuple[str, str]], int]:
    with engine.connect() as conn:
        states = conn.execute(sa.select(J.key, J.state).order_by(J.key)).all()
        events = conn.execute(sa.select(sa.func.count()).select_from(send_event)).scalar_one()
    return [(k, s) for k, s in states], events


COMMANDS = [
    ["in-doubt", "resolve", "--as", "failed"],
    ["in-doubt", "resolve", "--as", "sent"],
    ["in-doubt", "resolve", "--resend"],
    ["dead", "retry"],
]


@pytest.mark.parametrize(
    "prefix",
    [
        "",
        " ",
        "abc",
        "abcdef0",
        "zzzzzzzz",
        "abcdef0g",
        "[/]abcdef01",
        "abcdef01\n",
        "0x" + SHARED,
        "a" * 65,
        "abcdef01%",
        "abcdef01_",
        "ａｂｃｄｅｆ０１",
    ],
)
def test_invalid_prefixes_are_refused_and_change_nothing(
    prefix: str, db_url: str, engine: Engine, keys: dict[str, str]
) -> None:
    before = snapshot(engine)
    for command in COMMANDS:
        result = cli(db_url, *command[:2], prefix, *command[2:])
        assert result.exit_code == 2, (command, prefix, result.output)
        assert "invalid key prefix" in result.stderr, result.stderr
        assert "8 to 64 hex characters" in result.stderr
    assert snapshot(engine) == before


def test_an_ambiguous_prefix_is_refused_and_lists_matches(
    db_url: str, engine: Engine, keys: dict[str, str]
) -> None:
    before = snapshot(engine)
    for command in COMMANDS:
        result = cli(db_url, *command[:2], SHARED, *command[2:])
        assert result.exit_code == 2, result.output
        assert "ambiguous" in result.stderr
        assert keys["doubt1"][:16] in result.stderr
        assert keys["doubt2"][:16] in result.stderr
    # One good key and one ambiguous prefix: nothing at all is done.
    result = cli(db_url, "in-doubt", "resolve", keys["doubt1"], SHARED, "--as", "sent")
    assert result.exit_code == 2
    assert snapshot(engine) == before


def test_a_prefix_matching_no_job_is_an_error(
    db_url: str, engine: Engine, keys: dict[str, str]
) -> None:
    before = snapshot(engine)
    result = cli(db_url, "dead", "retry", "fedcba98")
    assert result.exit_code == 1, result.output
    assert "no job has a key starting with fedcba98" in result.stderr
    assert snapshot(engine) == before


def test_exact_keys_and_unique_prefixes_in_any_case_act_on_one_job(
    db_url: str, engine: Engine, keys: dict[str, str]
) -> None:
    resolved = cli(db_url, "in-doubt", "resolve", keys["doubt1"], "--as", "sent", "--json")
    assert resolved.exit_code == 0, resolved.output
    assert json.loads(resolved.stdout) == {"changed": [keys["doubt1"]], "count": 1}
    upper = keys["doubt2"][:9].upper()  # 9 characters: one past the shared prefix
    resolved = cli(db_url, "in-doubt", "resolve", upper, "--as", "failed", "--json")
    assert json.loads(resolved.stdout) == {"changed": [keys["doubt2"]], "count": 1}
    retried = cli(db_url, "dead", "retry", keys["dead1"][:8].upper(), "--json")
    assert retried.exit_code == 0, retried.output
    assert json.loads(retried.stdout) == {"changed": [keys["dead1"]], "count": 1}
    states = dict(snapshot(engine)[0])
    assert states == {keys["doubt1"]: "sent", keys["doubt2"]: "failed", keys["dead1"]: "pending"}
    # A key that names a job in another state is still "not in doubt", exit 1, as before.
    again = cli(db_url, "in-doubt", "resolve", keys["doubt1"], "--as", "failed")
    assert again.exit_code == 1
    assert "not in doubt" in again.stderr


_VALID = re.compile(r"[0-9a-f]{8,64}")


@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=80))
def test_only_8_to_64_hex_characters_are_a_prefix(raw: str) -> None:
    try:
        prefix = normalise_prefix(raw)
    except KeyPrefixError as exc:
        assert exc.invalid_input
        assert _VALID.fullmatch(raw.lower()) is None
        # What is echoed back is short and carries no markup or control characters.
        assert not any(c in str(exc) for c in "[]\r\n\x00")
        assert len(str(exc)) < 200
        return
    assert _VALID.fullmatch(prefix)
    assert prefix == raw.lower()


@given(st.from_regex(r"[0-9a-fA-F]{8,64}", fullmatch=True))
def test_every_hex_prefix_of_a_valid_length_is_accepted(raw: str) -> None:
    assert normalise_prefix(raw) == raw.lower()
