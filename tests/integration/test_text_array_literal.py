"""An outcome's texts reach PostgreSQL as one ``text[]`` literal each (dispatch/outbox/dialect.py,
``_foreign_text_array``), not as lists psycopg dumps element by element. The literal exists for
speed only: every text must come back exactly as ``ForeignText`` would have stored it, for any
text at all (quotes, backslashes, commas, braces, the word NULL, spaces, NUL, any unicode).

The second test records hostile outcomes through the real store on both databases and reads
back the job rows and the journal (SQLite takes its JSON batch: the same expectations hold).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.engine import Engine

from dbtypes import ForeignText
from dispatch.outbox.dialect import _foreign_text_array
from dispatch.outbox.jobs import Completion
from dispatch.states import State
from dispatch.store import NewJob, OutboxStore
from tests.support.examples import examples
from tests.support.outboxes import new_job

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
# Whatever the array parser could take for syntax, and text of any kind (UTF-8 encodable).
HOSTILE = ['"', "\\", '\\"', "NULL", "null", " NULL ", "{", "}", "{a,b}", ",", " ", "", "\x00"]
texts = st.text(
    alphabet=st.characters(codec="utf-8") | st.sampled_from(['"', "\\", ",", "{", "}", " "]),
    max_size=30,
) | st.sampled_from([*HOSTILE, "a\x00b", "\\x00", "é😀中", "'); --", "250 2.0.0 Ok: queued"])


def stored(value: str | None) -> str | None:
    """What ForeignText binds for ``value``: the oracle."""
    return ForeignText().process_bind_param(value, sa.create_engine("sqlite://").dialect)


def _postgres(engine: Engine) -> Engine:
    if engine.dialect.name != "postgresql":
        pytest.skip("a PostgreSQL array literal (SQLite batches are JSON)")
    return engine


@settings(
    max_examples=examples(150),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(values=st.lists(st.none() | texts, max_size=12))
def test_any_text_comes_back_from_the_literal(engine: Engine, values: list[str | None]) -> None:
    with _postgres(engine).connect() as conn:
        read = conn.execute(
            sa.text(
                "SELECT v FROM unnest(CAST(:v AS text[])) WITH ORDINALITY AS t(v, n) ORDER BY n"
            ),
            {"v": _foreign_text_array(values)},
        ).scalars()
        assert list(read) == [stored(v) for v in values]


def test_the_literal_quotes_every_element() -> None:
    # Unquoted, NULL would be read as a null and spaces around an element would be dropped.
    assert _foreign_text_array(["NULL", None, " a ", 'x"y\\z']) == (
        '{"NULL",NULL," a ","x\\"y\\\\z"}'
    )


def _jobs(count: int) -> Iterator[NewJob]:
    for i in range(count):
        yield new_job(f"{i:064d}", EPOCH, payload=b"x")


def test_outcomes_keep_hostile_text_exactly(engine: Engine) -> None:
    store = OutboxStore(engine.dialect.name)
    cases = [*HOSTILE, "a\x00b", "é😀中", "x" * 300]
    with engine.begin() as conn:
        store.enqueue(conn, list(_jobs(2 * len(cases))))
        leases = [job.lease for job in store.claim(conn, owner="w", limit=100, lease_seconds=600)]
        store.start_sends(conn, leases, margin_seconds=0, actor="w")
        sent, doubtful = leases[: len(cases)], leases[len(cases) :]
        completions = [
            Completion(lease, State.SENT, 250, text)
            for lease, text in zip(sent, cases, strict=True)
        ] + [
            Completion(lease, State.IN_DOUBT, None, text, in_doubt_reason=f"{text}!")
            for lease, text in zip(doubtful, cases, strict=True)
        ]
        applied = store.complete(conn, completions, actor="w")
    assert applied == {lease[0] for lease in leases}
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT id, outcome_text, in_doubt_reason FROM send_job ORDER BY id")
        ).all()
        events = conn.execute(
            sa.text("SELECT job_id, detail FROM send_event WHERE from_state = 'sending'")
        ).all()
    details = {row[0]: row[1] for row in events}
    by_id = {row[0]: (row[1], row[2]) for row in rows}
    for completion in completions:
        job_id = completion.lease[0]
        reason = completion.in_doubt_reason
        assert by_id[job_id] == (stored(completion.text), stored(reason)), completion
        assert details[job_id] == stored(completion.detail), completion
