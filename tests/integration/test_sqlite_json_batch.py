"""SQLite's JSON batches (one bound ``json_each`` text) write exactly what the per-row
``CASE`` form wrote: the same job rows and the same journal, for hostile values too.

The JSON form exists for speed only (a constant statement text is compiled and prepared once);
it must not change a single stored value: quotes, unicode, control characters, NUL (shown as
``\\x00`` by ForeignText), large codes and tokens, a stale lease that must stay fenced out.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import event

from dispatch.outbox import dialect, dialect_sqlite
from dispatch.outbox.jobs import Completion
from dispatch.states import State
from dispatch.store import NewJob, OutboxStore
from herald.db import create_engine
from tests.support.outboxes import new_job

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
BIG = 2**62

texts = st.text(alphabet=st.characters(codec="utf-8"), max_size=40) | st.sampled_from(
    ["", 'it\'s "quoted"', "a\x00b", "\x01\x1f\x7f", "é😀中", "\\x00", "\\u0000", "'); --"]
)
outcomes = st.tuples(
    st.sampled_from(
        [
            (State.SENT, False),
            (State.PENDING, False),
            (State.FAILED, False),
            (State.FAILED, True),
            (State.IN_DOUBT, False),
            (State.PENDING, True),
        ]
    ),
    st.none() | st.integers(min_value=-(2**63), max_value=2**63 - 1),
    texts,
    st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False),
    st.none() | texts,
)


def _jobs(count: int) -> Iterator[NewJob]:
    for i in range(count):
        yield new_job(f"{i:064d}", EPOCH, payload=b"x")


def _run(template: Path, directory: Path, cases: list[Any], json_batches: bool) -> Any:
    path = directory / f"{uuid.uuid4().hex}.db"
    shutil.copyfile(template, path)
    engine = create_engine(f"sqlite:///{path}")
    statements: list[str] = []
    event.listen(engine, "before_cursor_execute", lambda *a: statements.append(a[2]))
    store = OutboxStore("sqlite")
    saved, dialect_sqlite.JSON_BATCHES = dialect_sqlite.JSON_BATCHES, json_batches
    try:
        with engine.begin() as conn:
            store.enqueue(conn, list(_jobs(len(cases) + 1)))
            claimed = store.claim(conn, owner="w", limit=len(cases) + 1, lease_seconds=600)
            # Large tokens, as a long-lived outbox reaches.
            conn.exec_driver_sql("UPDATE send_job SET lease_token = lease_token + ?", (BIG,))
            leases = [(job.id, job.lease[1] + BIG) for job in claimed]
            after_data = [lease for lease, c in zip(leases, cases, strict=False) if not c[0][1]]
            store.start_sends(conn, after_data, margin_seconds=0, actor="w")
            completions = [
                Completion(lease, target, code, text, retry, reason, before)
                for lease, ((target, before), code, text, retry, reason) in zip(
                    leases, cases, strict=False
                )
            ]
            stale = leases[-1][0], leases[-1][1] - 1  # a fenced-out lease: must change nothing
            done = store.complete(conn, [*completions, Completion(stale, State.SENT)], actor="w")
        with engine.connect() as conn:
            jobs = conn.exec_driver_sql(
                "SELECT id, state, lease_token, lease_owner, lease_expires_at IS NULL,"
                " outcome_code, outcome_text, in_doubt_reason, send_attempts,"
                " CASE WHEN state = 'pending' THEN round(not_before - outcome_at, 3) END"
                " FROM send_job ORDER BY id"
            ).all()
            events = conn.exec_driver_sql(
                "SELECT job_id, token, from_state, to_state, actor, detail FROM send_event"
                " ORDER BY job_id, id"
            ).all()
    finally:
        dialect_sqlite.JSON_BATCHES = saved
        engine.dispose()
    used_json = any("json_each" in s for s in statements)
    return done, jobs, events, used_json


@settings(
    max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(cases=st.lists(outcomes, min_size=1, max_size=6))
def test_json_batch_writes_what_the_case_form_wrote(
    sqlite_template: Path, tmp_path: Path, cases: list[Any]
) -> None:
    done, jobs, events, used_json = _run(sqlite_template, tmp_path, cases, json_batches=True)
    old = _run(sqlite_template, tmp_path, cases, json_batches=False)
    assert used_json  # each run took the form it was meant to
    assert not old[3]
    assert (done, jobs, events) == old[:3]
    claims, starts, ends = 2 * len(jobs), sum(1 for c in cases if not c[0][1]), len(cases)
    assert len(events) == claims + starts + ends, events  # enqueue+claim, T4, T5


def test_json_is_only_for_finite_values() -> None:
    column = dialect.Column(sa.Float(), {1: float("inf")})
    assert isinstance(
        dialect.SqliteForms().batch([(1, 1)], {"x": column}), dialect_sqlite._InListBatch
    )
    if not dialect_sqlite.JSON_BATCHES:
        pytest.skip("SQLite < 3.38: the CASE form only")
    column = dialect.Column(sa.Float(), {1: 1.5})
    assert isinstance(
        dialect.SqliteForms().batch([(1, 1)], {"x": column}), dialect_sqlite._JsonBatch
    )


@pytest.mark.parametrize(
    ("target", "values"),
    [
        (State.SENT, ["id", "token", "code", "text", "detail"]),
        (State.PENDING, ["id", "token", "code", "text", "detail", "retry_in"]),
        (State.IN_DOUBT, ["id", "token", "code", "text", "detail", "reason"]),
    ],
)
def test_a_completion_batch_carries_only_what_its_statement_reads(
    sqlite_template: Path, tmp_path: Path, target: State, values: list[str]
) -> None:
    """Every value in the batch is encoded, bound and unpacked for every job: T5, the drain's
    common case, sends none of the retry delay and in-doubt reason it never reads."""
    if not dialect_sqlite.JSON_BATCHES:
        pytest.skip("SQLite < 3.38: the CASE form only")
    path = tmp_path / "outbox.db"
    shutil.copyfile(sqlite_template, path)
    engine = create_engine(f"sqlite:///{path}")
    statements: list[str] = []
    store = OutboxStore("sqlite")
    try:
        with engine.begin() as conn:
            store.enqueue(conn, list(_jobs(1)))
            (job,) = store.claim(conn, owner="w", limit=1, lease_seconds=600)
            store.start_sends(conn, [job.lease], margin_seconds=0, actor="w")
            event.listen(conn, "before_cursor_execute", lambda *a: statements.append(a[2]))
            done = store.complete(
                conn, [Completion(job.lease, target, 450, "busy", 30.0, "why")], actor="w"
            )
    finally:
        engine.dispose()
    assert done == {job.id}
    (update,) = [s for s in statements if "json_each" in s]
    named = [
        n
        for n in ("id", "token", "code", "text", "detail", "retry_in", "reason")
        if f" AS {n}" in update
    ]
    assert named == values, update
