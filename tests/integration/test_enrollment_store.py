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
