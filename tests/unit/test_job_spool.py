"""The launch's spool (scheduler.spool) gives back exactly the jobs and unusable rows it was given,
in order, across compressed blocks, and stays appendable after being read."""

from __future__ import annotations

import tempfile
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatch.store import NewJob
from scheduler import spool as spool_module
from scheduler.spool import JobSpool, read_blocks, write_block

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


@given(st.lists(st.none() | jobs(), max_size=30))
def test_a_job_read_back_is_equal_and_hashes_equal(entries: list[NewJob | None]) -> None:
    """Jobs come back built without the dataclass's __init__ (spool._job): the same fields,
    the same frozen, equal, hashable instance."""
    with JobSpool(["s"]) as spool:
        for position, job in enumerate(entries, start=1):
            if job is not None:
                spool.add_job(position, job)
        back = [job for _, job in spool.entries("s")]
    sent = [job for job in entries if job is not None]
    assert back == sent
    for got, job in zip(back, sent, strict=True):
        assert got is not None
        assert hash(got) == hash(job)
        assert vars(got) == vars(job)
        with pytest.raises(AttributeError):
            got.key = "changed"  # type: ignore[misc]


@given(
    st.lists(st.none() | jobs(), max_size=30),
    st.integers(1, 5),
    st.integers(2, 4),
)
def test_parts_filled_by_other_processes_merge_in_audience_order(
    entries: list[NewJob | None], block: int, processes: int
) -> None:
    """The check's processes fill one spool each, dealing blocks of positions round-robin
    (scheduler.check_pool); adopted parts read back as one spool in audience order."""
    with JobSpool(["s"]) as spool:
        parts = [JobSpool(["s"]) for _ in range(processes - 1)]
        owners = [spool, *parts]
        for position, job in enumerate(entries, start=1):
            owner = owners[(position - 1) // block % processes]
            if job is None:
                owner.add_problem(position)
            else:
                owner.add_job(position, job)
        for part in parts:
            written = part.written()
            spool.adopt(part, written)
        assert list(spool.entries("s")) == list(enumerate(entries, start=1))
        assert spool.count("s") == sum(job is not None for job in entries)
        assert spool.skipped == sum(job is None for job in entries)
        assert spool.positions == len(entries)
        spool.reset()  # a check that starts over in one process
        assert list(spool.entries("s")) == []
        assert (spool.count("s"), spool.positions, spool.skipped) == (0, 0, 0)


def test_a_part_of_other_steps_is_refused() -> None:
    with (
        JobSpool(["s"]) as spool,
        JobSpool(["t"]) as other,
        pytest.raises(ValueError, match="other steps"),
    ):
        spool.adopt(other, other.written())


def test_readers_of_one_file_do_not_share_its_position() -> None:
    """Forked processes share an open file's position; so do two readers of one file object.
    Each reader reads every block from the start, whatever the other has read, and appending
    afterwards still appends (scheduler.occurrence_pool reads one file in several processes)."""
    blocks = [[(i, f"row {i}")] for i in range(4)]
    with tempfile.TemporaryFile() as file:
        for block in blocks:
            write_block(file, block)
        first = read_blocks(file)
        assert [next(first), next(first)] == blocks[:2]
        assert list(read_blocks(file)) == blocks
        assert list(first) == blocks[2:]
        write_block(file, [(9, "late")])
        assert list(read_blocks(file))[-1] == [(9, "late")]
