"""``EnrollmentStore.enroll`` enrolls each mailbox once and names exactly the new ones.

Its rows go to the database as one statement's parameters (SQLAlchemy sends them as multi-row
INSERTs); the property holds that form to what it must mean on both databases: mailboxes
enrolled before, repeated within a batch, spread over several chunks.
"""

from __future__ import annotations

from datetime import UTC, datetime
from unittest import mock

import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.engine import Engine

from scheduler import enrollment_store
from scheduler.enrollment_store import EnrollmentStore, NewEnrollment
from scheduler.models import enrollment_table
from tests.support.examples import examples

AT = datetime(2026, 1, 6, 10, 0, tzinfo=UTC)
MAILBOXES = st.sampled_from([f"m{i}@example.com" for i in range(12)] + ["o'neil@example.com"])


def _entry(mailbox: str) -> NewEnrollment:
    return NewEnrollment(mailbox, mailbox.upper(), None, {"k": "v"}, None, "audience")


@settings(
    max_examples=examples(40),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    before=st.lists(MAILBOXES, max_size=6),
    batch=st.lists(MAILBOXES, max_size=20),
    campaign=st.sampled_from(["a", "b"]),
)
def test_enroll_names_exactly_the_mailboxes_it_enrolled(
    engine: Engine, before: list[str], batch: list[str], campaign: str
) -> None:
    store = EnrollmentStore(engine.dialect.name)
    e = enrollment_table.c
    with engine.connect() as conn, mock.patch.object(enrollment_store, "CHUNK", 3):
        try:
            store.enroll(conn, campaign, [_entry(m) for m in before], enrolled_at=AT)
            created = store.enroll(conn, campaign, [_entry(m) for m in batch], enrolled_at=AT)
            held = conn.execute(
                sa.select(e.mailbox, sa.func.count())
                .where(e.campaign == campaign)
                .group_by(e.mailbox)
            ).all()
        finally:
            conn.rollback()  # every example starts from no enrollment
    assert sorted(created) == sorted(set(batch) - set(before))
    assert dict(held) == dict.fromkeys(set(before) | set(batch), 1)


# Any text PostgreSQL stores (no NUL, no lone surrogate): quotes, commas, braces, backslashes
# and the word NULL are what an array literal or a multi-row INSERT could get wrong.
TEXT = st.text(
    alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\x00")
    | st.sampled_from(['"', "'", ",", "{", "}", "\\", " "]),
    max_size=12,
) | st.just("NULL")
ENTRY = st.builds(
    NewEnrollment,
    mailbox=MAILBOXES,
    recipient=TEXT,
    name=st.none() | TEXT,
    variables=st.dictionaries(TEXT, TEXT, max_size=3),
    timezone=st.none() | TEXT,
    source=st.sampled_from(["audience", "cli"]),
)


@settings(
    max_examples=examples(40),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(batch=st.lists(ENTRY, max_size=10))
def test_enroll_stores_each_new_mailbox_as_its_first_entry_says(
    engine: Engine, batch: list[NewEnrollment]
) -> None:
    """Every column of a new enrollment is what its first entry in the batch says, for any
    text (on PostgreSQL the batch goes as one array a column)."""
    store = EnrollmentStore(engine.dialect.name)
    e = enrollment_table.c
    with engine.connect() as conn, mock.patch.object(enrollment_store, "CHUNK", 4):
        try:
            store.enroll(conn, "c", batch, enrolled_at=AT)
            stored = {
                row.mailbox: row
                for row in store.by_ids(conn, list(conn.execute(sa.select(e.id)).scalars()))
            }
        finally:
            conn.rollback()
    first: dict[str, NewEnrollment] = {}
    for entry in batch:
        first.setdefault(entry.mailbox, entry)
    assert set(stored) == set(first)
    for mailbox, entry in first.items():
        row = stored[mailbox]
        assert (row.recipient, row.name, row.variables, row.timezone, row.source) == (
            entry.recipient,
            entry.name,
            dict(entry.variables),
            entry.timezone,
            entry.source,
        )
        assert (row.campaign, row.enrolled_at, row.state, row.next_step) == ("c", AT, "active", 0)


_MAILBOXES = [f"m{i}@example.com" for i in range(10)]


@settings(
    max_examples=examples(40),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    held=st.lists(
        st.tuples(st.sampled_from(["active", "left", "done"]), st.integers(0, 3)),
        min_size=len(_MAILBOXES),
        max_size=len(_MAILBOXES),
    ),
    moves=st.lists(
        st.tuples(
            st.integers(0, len(_MAILBOXES) - 1),
            st.integers(0, 3),
            st.none() | st.integers(0, 4),  # None: the next step (advance), else a repoint
        ),
        max_size=12,
    ),
    ended=st.lists(st.integers(0, len(_MAILBOXES) - 1), max_size=6),
)
def test_batched_moves_change_exactly_the_rows_their_guards_allow(
    engine: Engine,
    held: list[tuple[str, int]],
    moves: list[tuple[int, int, int | None]],
    ended: list[int],
) -> None:
    """``move_many`` (and ``advance_many``, to the next step) moves an enrollment only if it
    is active at the step asked (one statement per (from, to) and chunk); ``finish_many`` ends
    only active ones. Both name exactly the rows they changed, as one guarded UPDATE per row
    did."""
    store = EnrollmentStore(engine.dialect.name)
    e = enrollment_table.c
    # One move per enrollment, as a drip pass or a new version makes them.
    by_row = {i: (step, to) for i, step, to in moves}
    with engine.connect() as conn, mock.patch.object(enrollment_store, "CHUNK", 3):
        try:
            store.enroll(conn, "c", [_entry(m) for m in _MAILBOXES], enrolled_at=AT)
            ids = dict(conn.execute(sa.select(e.mailbox, e.id)).all())
            rows = [ids[m] for m in _MAILBOXES]
            for row, (state, step) in zip(rows, held, strict=True):
                conn.execute(
                    sa.update(enrollment_table)
                    .where(e.id == row)
                    .values(state=state, next_step=step)
                )
            asked = [
                (rows[i], step, step + 1 if to is None else to) for i, (step, to) in by_row.items()
            ]
            advancing = [(rows[i], step) for i, (step, to) in by_row.items() if to is None]
            repointing = [(rows[i], step, to) for i, (step, to) in by_row.items() if to is not None]
            store.lock(conn, [row for row, _, _ in asked] + [rows[i] for i in ended])
            moved = store.advance_many(conn, advancing) | store.move_many(conn, repointing)
            finished = store.finish_many(conn, [rows[i] for i in ended], "done")
            after = {
                r.id: (r.state, r.next_step)
                for r in conn.execute(sa.select(e.id, e.state, e.next_step))
            }
        finally:
            conn.rollback()
    before = dict(zip(rows, held, strict=True))
    expected_moved = {row for row, step, _ in asked if before[row] == ("active", step)}
    assert moved == expected_moved
    target = {row: to for row, _, to in asked}
    model = {
        row: (state, target[row] if row in expected_moved else step)
        for row, (state, step) in before.items()
    }
    expected_finished = {rows[i] for i in ended if model[rows[i]][0] == "active"}
    # Each with its next_step as the UPDATE left it: the steps its drip materialised.
    assert finished == {row: model[row][1] for row in expected_finished}
    for row in expected_finished:
        model[row] = ("done", model[row][1])
    assert after == model
