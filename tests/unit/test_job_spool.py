"""The launch's spool (scheduler.spool) gives back exactly the jobs and unusable rows it was given,
in order, across compressed blocks, and stays appendable after being read."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatch.store import NewJob
from scheduler import spool as spool_module
from scheduler.spool import JobSpool

AT = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
text = st.text(st.characters(codec="utf-8"), max_size=30)


@st.composite
def jobs(draw: st.DrawFn) -> NewJob:
    return NewJob(
        key=draw(text),
        key_tuple=draw(text),
        campaign=draw(text),
        step="s",
        occurrence_at=AT,
        channel="email",
        sender=draw(text),
        recipient=draw(text),
        message_id=draw(text),
        payload=draw(st.binary(max_size=3000)),
        not_before=AT + timedelta(microseconds=draw(st.integers(0, 10**12))),
        max_send_attempts=draw(st.integers(1, 9)),
        max_claims=draw(st.integers(1, 9)),
        in_doubt_policy="hold",
        mailbox=draw(st.none() | text),
        send_window=draw(st.none() | text),
        list_scope=draw(st.none() | text),
    )


@given(st.lists(st.none() | jobs(), max_size=40))
def test_the_spool_gives_back_every_entry_in_order(entries: list[NewJob | None]) -> None:
    with JobSpool(["s"]) as spool:
        for position, job in enumerate(entries, start=1):
            if job is None:
                spool.add_problem(position)
            else:
                spool.add_job(position, job)
        expected = list(enumerate(entries, start=1))
        assert list(spool.entries("s")) == expected
        assert list(spool.entries("s")) == expected  # read twice (a finished fan-out re-walks)
        assert spool.count("s") == sum(job is not None for job in entries)


def test_many_blocks_and_appending_after_a_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spool_module, "BLOCK_BYTES", 200)  # a block every record or two
    job = NewJob(
        key="k",
        key_tuple="k",
        campaign="c",
        step="s",
        occurrence_at=AT,
        channel="email",
        sender="f@x.test",
        recipient="r@x.test",
        message_id="<k@x.test>",
        payload=b"x" * 150,
        not_before=AT,
    )
    with JobSpool(["s", "t"]) as spool:
        for position in range(1, 51):
            spool.add_job(position, job)
        spool.add_problem(51)
        assert [p for p, _ in spool.entries("s")] == list(range(1, 52))
        spool.add_job(52, job)
        got = list(spool.entries("s"))
        assert [p for p, _ in got] == list(range(1, 53))
        assert got[-2] == (51, None)
        assert got[-1] == (52, job)
        assert list(spool.entries("t")) == [(51, None)]
