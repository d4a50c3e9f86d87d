"""scheduler.drip_pool: items composed by forked processes come back in the items' order, each
the job this process would compose; the work beside them runs exactly once whatever happens;
anything short of a clean result is left to the caller."""

from __future__ import annotations

import os
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dispatch.store import NewJob
from scheduler.check_pool import CheckPool
from scheduler.drip_pool import compose_in_processes, in_order
from scheduler.spool import JobSpool
from templates.errors import TemplateError
from tests.support.examples import examples
from tests.support.factories import new_job

STEPS = ["welcome", "tips", "last"]
AT = datetime(2026, 1, 6, 10, 0, tzinfo=UTC)


def composed(item: tuple[int, int, str]) -> NewJob:
    """A job that shows which item it was composed from (its key, step and payload)."""
    number, step, text = item
    job = new_job(f"{number:064d}", due=AT)
    return replace(job, step=STEPS[step], payload=f"{number}:{text}".encode())


@settings(max_examples=examples(40), deadline=None)
@given(
    steps=st.lists(st.integers(0, 2), min_size=1, max_size=30),
    texts=st.lists(st.text(max_size=20), min_size=30, max_size=30),
    processes=st.integers(2, 3),
    block=st.integers(1, 5),
)
def test_jobs_come_back_in_the_items_order(
    steps: list[int], texts: list[str], processes: int, block: int
) -> None:
    """Any mix of steps, dealt to processes in blocks of any size: job ``i`` is item ``i``'s."""
    items = [(number, step, texts[number]) for number, step in enumerate(steps)]
    spool = compose_in_processes(
        CheckPool(processes, block=block, min_rows=1), STEPS, items, composed
    )
    assert spool is not None
    with spool:
        jobs = list(in_order(spool, [STEPS[step] for step in steps]))
    assert jobs == [composed(item) for item in items]


def items(count: int) -> list[tuple[int, int, str]]:
    return [(number, number % 3, "x") for number in range(count)]


def test_beside_runs_once_in_this_process_while_the_children_compose() -> None:
    ran: list[int] = []
    spool = compose_in_processes(
        CheckPool(2, block=2, min_rows=1),
        STEPS,
        items(9),
        composed,
        beside=lambda: ran.append(os.getpid()),
    )
    assert ran == [os.getpid()]
    assert spool is not None
    with spool:
        assert len(list(in_order(spool, [STEPS[n % 3] for n in range(9)]))) == 9


def test_too_few_items_are_left_to_the_caller_after_beside() -> None:
    ran: list[str] = []
    spool = compose_in_processes(
        CheckPool(2, min_rows=10), STEPS, items(9), composed, beside=lambda: ran.append("x")
    )
    assert spool is None
    assert ran == ["x"]


def test_beside_runs_even_when_no_process_can_start(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused() -> int:
        raise OSError("fork refused")

    monkeypatch.setattr(os, "fork", refused)
    ran: list[str] = []
    spool = compose_in_processes(
        CheckPool(2, min_rows=1), STEPS, items(9), composed, beside=lambda: ran.append("x")
    )
    assert spool is None
    assert ran == ["x"]


def test_what_beside_raises_propagates() -> None:
    def failing() -> None:
        raise RuntimeError("the previous chunk's write failed")

    with pytest.raises(RuntimeError, match="previous chunk"):
        compose_in_processes(CheckPool(2, min_rows=1), STEPS, items(9), composed, beside=failing)


def test_a_message_that_cannot_be_rendered_anywhere_drops_the_spool() -> None:
    def boom_at_seven(item: tuple[int, int, str]) -> NewJob:
        if item[0] == 7:
            raise TemplateError("undefined variable 'nope'")
        return composed(item)

    pool = CheckPool(2, block=2, min_rows=1)
    assert pool.share(8) == 1  # item 7 (position 8) is a child's
    assert compose_in_processes(pool, STEPS, items(12), boom_at_seven) is None
    assert (
        compose_in_processes(CheckPool(2, block=8, min_rows=1), STEPS, items(12), boom_at_seven)
        is None
    )


def test_a_spool_read_against_other_steps_is_refused() -> None:
    with JobSpool(STEPS) as spool:
        spool.add_job(1, composed((0, 0, "x")))
        spool.add_job(2, composed((1, 0, "x")))
        with pytest.raises(RuntimeError, match="out of order at 2"):
            list(in_order(spool, ["welcome", "tips"]))
