"""A drip pass's next steps composed by several processes at once.

A drip pass composed the next step of every ready enrollment in its own process: at a launch,
step 1 for the whole audience; once step 1 has gone out, step 2 for everyone. One core, and
most of such a pass's time (bench/profiles/fanout.md, session 41). Now the pass reads a chunk
of ready enrollments, a pool's processes compose it (scheduler.check_pool: each its share of
the chunk's positions; the children inherit the chunk from the fork, and only their summaries
cross a pipe), and the pass writes the chunk page by page as before, each enrollment's job
taken from the merged spool in the chunk's order.

The same messages as the pass's own composing: the same function with the same arguments for
the same enrollments (tests/integration/test_drip_pool.py). Only a clean result is taken: if a
message cannot be rendered or a process fails, the spool is dropped and the pass composes the
chunk itself, ending the drips it cannot render, as it always did. The pool composes with steps
compiled for it alone, so a render limit met there is not remembered by the pass's own
(templates.guarded_render). A chunk smaller than ``CheckPool.min_rows`` is not worth the forks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

from dispatch.store import NewJob
from scheduler.check_pool import CheckPool, Shares, check_in_processes
from scheduler.check_report import CheckReport, Problem
from scheduler.spool import JobSpool
from templates.errors import TemplateError

T = TypeVar("T")


def compose_in_processes(
    pool: CheckPool,
    steps: Sequence[str],
    items: Sequence[T],
    compose: Callable[[T], NewJob],
    *,
    beside: Callable[[], None] | None = None,
) -> JobSpool | None:
    """One job per item, ``compose``-d by the pool's processes, in a spool the caller closes
    (position ``i`` is ``items[i - 1]``); None when the caller should compose them itself: too
    few items, a message that cannot be rendered, or a process that failed.

    ``beside``: this process's own work meanwhile (the previous chunk's writing), instead of a
    share. It runs exactly once whatever happens, here after all if no process could start;
    what it raises propagates, and the composed jobs are dropped."""
    ran = False

    def run_beside() -> None:
        nonlocal ran
        ran = True
        if beside is not None:
            beside()

    if len(items) < pool.min_rows:
        run_beside()
        return None

    def read(wanted: Callable[[int], bool]) -> Iterator[T | None]:
        for position, item in enumerate(items, start=1):
            yield item if wanted(position) else None

    def check(part: JobSpool | None, report: CheckReport, position: int, item: T) -> bool:
        try:
            job = compose(item)
        except TemplateError as exc:
            report.add(Problem(f"position {position}", None, str(exc)))
            return False
        assert part is not None  # check_in_processes always passes its spool or a part
        part.add_job(position, job)
        report.recipients += 1
        report.messages += 1
        return True

    spool = JobSpool(steps)
    try:
        report = check_in_processes(
            pool,
            spool,
            Shares[T](read, check),
            None,
            beside=None if beside is None else run_beside,
        )
        if report is None and not ran:
            run_beside()  # no process could start: the work is done all the same
    except BaseException:
        spool.close()
        raise
    if report is None or report.messages != len(items):
        spool.close()
        return None
    return spool


def in_order(spool: JobSpool, steps: Sequence[str]) -> Iterator[NewJob]:
    """The spool's jobs in the items' order, ``steps[i]`` being the step of item ``i + 1``'s
    job: each step's stream is read in step with the others."""
    streams = {step: spool.entries(step) for step in spool.steps}
    for position, step in enumerate(steps, start=1):
        entry = next(streams[step], None)
        if entry is None or entry[0] != position or entry[1] is None:  # another chunk's: never
            raise RuntimeError(f"the composed drips are out of order at {position}")
        yield entry[1]
