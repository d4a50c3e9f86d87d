"""Drips: each active enrollment's next step, materialised once its previous step has settled.

A drip's steps are materialised one at a time. Step 1 is planned from ``enrolled_at``; step k
from the ACTUAL send of step k−1 (its job's ``outcome_at``, once it is ``sent`` or ``failed``),
as drip tools do: a recipient whose mail waited in a send window, or was retried for an hour,
still gets the promised gap before the next one. While step k−1 is pending, claimed, sending or
``in_doubt``, the drip waits; a ``cancelled`` step k−1 (withdrawn, campaign cancelled) ends it.
After the last step settles the enrollment is ``done``.

Exactly once: step k's job is inserted in the transaction whose guarded UPDATE moves
``next_step`` from k to k+1; a scheduler whose UPDATE finds another value writes nothing.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from campaigns.audience import Recipient
from campaigns.control import CampaignConflict
from campaigns.spec import LoadedCampaign
from campaigns.store import CampaignStore
from dispatch.store import NewJob, OutboxStore
from scheduler.check_pool import CheckPool
from scheduler.compose import CompiledStep, CompileFailures, compile_steps, compose_job
from scheduler.drip_pool import compose_in_processes, in_order
from scheduler.drip_ready import ReadyPages
from scheduler.enrollment import drip_key, end_drips
from scheduler.enrollment_store import DONE, ENDED, EnrollmentRow, EnrollmentStore
from scheduler.job_lookup import JobOutcome, outcomes
from scheduler.planning import Planner
from scheduler.spool import JobSpool
from scheduler.unsubscribe_links import UnsubscribeLinks
from templates.errors import TemplateError

PAGE = 500  # enrollments per read and per transaction
#: Ready drips read before they are written, when a pool composes them (scheduler.drip_pool):
#: enough to be worth the forks, and a few megabytes of enrollments in memory.
CHUNK = 10_000
SETTLED = ("sent", "failed")
CANCELLED = "cancelled"


@dataclass
class DripReport:
    materialised: int = 0  # step jobs inserted
    waiting: int = 0  # drips read whose previous step turned out not to have settled yet
    done: int = 0
    ended: int = 0  # a step was cancelled, or cannot be rendered
    problems: list[str] | None = None  # rendering problems (the drip ended)
    processes: int = 1  # the most that composed one chunk of this pass's steps


@dataclass(frozen=True)
class _Next:
    row: EnrollmentRow
    anchor: datetime  # step next_step counts from here


Finished = tuple[EnrollmentRow, str, str | None]  # the drip, its end state, and why


@dataclass
class _Page:
    ready: list[_Next]
    finished: list[Finished]


def advance_drips(
    engine: Engine,
    loaded: LoadedCampaign,
    steps: list[CompiledStep],
    *,
    actor: str,
    page: int = PAGE,
    pool: CheckPool | None = None,
    links: UnsubscribeLinks | None = None,
    chunk: int = CHUNK,
) -> DripReport:
    """Materialise the next step of every active enrollment that is ready for it.

    ``pool``: processes that compose a chunk of ``chunk`` ready drips (scheduler.drip_pool;
    None: this process composes them, a page at a time); ``links`` as ``steps`` were compiled
    with, for the pool's own compiling."""
    report = DripReport()
    planner = Planner(loaded.spec)
    step_ids = [step.spec.id for step in steps]
    pages = _ready_pages(engine, loaded.spec.name, step_ids, page, report)
    if pool is None:
        for held_page in pages:
            _write(engine, loaded, steps, planner, held_page, actor, report, None)
        return report

    def write(held: list[_Page], composed: JobSpool | None) -> None:
        """A chunk's pages, each job taken from ``composed`` (None: composed here)."""
        try:
            jobs = None if composed is None else in_order(composed, _steps_of(held, step_ids))
            for held_page in held:
                _write(engine, loaded, steps, planner, held_page, actor, report, jobs)
        finally:
            if composed is not None:
                composed.close()

    # Pipelined: the pool composes a chunk while this process writes the one before it.
    # Reading ahead of writing changes nothing: a page's write touches its own drips only.
    unwritten: tuple[list[_Page], JobSpool | None] | None = None
    try:
        for held in _chunks(pages, chunk):
            before, unwritten = unwritten, None
            composed = _pooled(
                pool,
                loaded,
                links,
                planner,
                held,
                beside=None if before is None else functools.partial(write, *before),
            )
            unwritten = held, composed
            if composed is not None:
                report.processes = max(report.processes, pool.processes)
        if unwritten is not None:
            last, unwritten = unwritten, None
            write(*last)
    finally:
        if unwritten is not None and unwritten[1] is not None:
            unwritten[1].close()
    return report


def _ready_pages(
    engine: Engine, name: str, step_ids: list[str], page: int, report: DripReport
) -> Iterator[_Page]:
    """The drips that may be ready, a page at a time, by id."""
    pages = ReadyPages()
    after_id = 0
    while True:
        with engine.connect() as conn:
            rows = pages.page(conn, name, step_ids, after_id=after_id, limit=page)
            previous = _previous_outcomes(conn, name, step_ids, rows)
        if not rows:
            return
        after_id = rows[-1].id
        yield _sorted(rows, step_ids, previous, report)


def _chunks(pages: Iterator[_Page], chunk: int) -> Iterator[list[_Page]]:
    """Pages gathered until they hold ``chunk`` ready drips (the last gathering, whatever
    they hold)."""
    held: list[_Page] = []
    ready = 0
    for held_page in pages:
        held.append(held_page)
        ready += len(held_page.ready)
        if ready >= chunk:
            yield held
            held, ready = [], 0
    if held:
        yield held


def _sorted(
    rows: list[EnrollmentRow],
    step_ids: list[str],
    previous: dict[int, JobOutcome | None],
    report: DripReport,
) -> _Page:
    """A page's drips: ready for their next step, finished, or (counted) waiting."""
    sorted_page = _Page([], [])
    for row in rows:
        decision = _decide(row, step_ids, previous)
        if isinstance(decision, datetime):
            sorted_page.ready.append(_Next(row, decision))
        elif decision is None:
            report.waiting += 1
        else:
            sorted_page.finished.append((row, *decision))
    return sorted_page


def _pooled(
    pool: CheckPool,
    loaded: LoadedCampaign,
    links: UnsubscribeLinks | None,
    planner: Planner,
    held: list[_Page],
    *,
    beside: Callable[[], None] | None,
) -> JobSpool | None:
    """The held pages' next steps composed by ``pool`` while ``beside`` runs here (None:
    compose them here; ``beside`` has run all the same)."""
    ready = [item for held_page in held for item in held_page.ready]
    steps = None
    if len(ready) >= pool.min_rows:  # a small chunk is composed here: not even compiled
        # A template file changed meanwhile: composed here, as it always was.
        with contextlib.suppress(CompileFailures):
            steps = compile_steps(loaded, links)  # the pool's own (scheduler.drip_pool)
    if steps is None:
        if beside is not None:
            beside()
        return None
    pool_steps = steps
    return compose_in_processes(
        pool,
        [step.spec.id for step in pool_steps],
        ready,
        lambda item: _compose(loaded, pool_steps, planner, item),
        beside=beside,
    )


def _steps_of(held: list[_Page], step_ids: list[str]) -> list[str]:
    return [step_ids[item.row.next_step] for held_page in held for item in held_page.ready]


def _previous_outcomes(
    conn: sa.Connection, name: str, step_ids: list[str], rows: list[EnrollmentRow]
) -> dict[int, JobOutcome | None]:
    """enrollment id -> the job of its last materialised step (None: not found)."""
    keys = {
        row.id: drip_key(name, step_ids[row.next_step - 1], row)
        for row in rows
        if row.next_step > 0
    }
    found = outcomes(conn, list(keys.values()))
    return {enrollment: found.get(key) for enrollment, key in keys.items()}


Decision = datetime | None | tuple[str, str | None]


def _decide(
    row: EnrollmentRow, step_ids: list[str], previous: dict[int, JobOutcome | None]
) -> Decision:
    """The anchor of the next step; None to wait; or (state, reason) to end the drip."""
    if row.next_step == 0:
        return row.enrolled_at
    job = previous.get(row.id)
    if job is None:
        return None  # not visible yet (another scheduler's transaction): wait
    if job.state == CANCELLED:
        return ENDED, f"step {step_ids[row.next_step - 1]!r} was cancelled"
    if job.state not in SETTLED or job.outcome_at is None:
        return None  # pending, claimed, sending, in_doubt: wait for it
    if row.next_step >= len(step_ids):
        return DONE, None
    return job.outcome_at


def _write(
    engine: Engine,
    loaded: LoadedCampaign,
    steps: list[CompiledStep],
    planner: Planner,
    held_page: _Page,
    actor: str,
    report: DripReport,
    precomposed: Iterator[NewJob] | None,
) -> None:
    """One page's transaction. ``precomposed``: its ready drips' jobs, in order (None:
    composed here)."""
    ready, finished = held_page.ready, list(held_page.finished)
    if not ready and not finished:
        return
    name = loaded.spec.name
    step_ids = [step.spec.id for step in steps]
    store = EnrollmentStore(engine.dialect.name)
    outbox = OutboxStore(engine.dialect.name)
    composed: list[tuple[_Next, NewJob]] = []
    for item in ready:
        try:
            job = (
                next(precomposed)
                if precomposed is not None
                else _compose(loaded, steps, planner, item)
            )
            composed.append((item, job))
        except TemplateError as exc:
            step = step_ids[item.row.next_step]
            problem = f"{item.row.recipient}: step {step!r}: {exc}"
            report.problems = [*(report.problems or []), problem]
            finished.append((item.row, ENDED, f"step {step!r} cannot be rendered: {exc}"))
    with engine.begin() as conn:
        # A new version stored meanwhile owns this campaign's jobs now (scheduler.fanout).
        stored = CampaignStore(engine.dialect.name).spec_hash(conn, name, lock=True)
        if stored is not None and stored != loaded.spec_hash:
            raise CampaignConflict(
                f"campaign {name!r} changed during a scheduler pass", hint="the next pass retries"
            )
        # Every row this transaction changes is locked first, in id order, as every scheduler
        # takes them: two passes then wait for each other instead of deadlocking.
        store.lock(conn, [item.row.id for item, _ in composed] + [row.id for row, *_ in finished])
        # The guarded UPDATE first: only the scheduler that moves next_step inserts the job.
        moved = store.advance_many(
            conn, [(item.row.id, item.row.next_step) for item, _ in composed]
        )
        jobs = [job for item, job in sorted(composed, key=_by_id) if item.row.id in moved]
        done = [row.id for row, state, _ in finished if state == DONE]
        report.done += len(store.finish_many(conn, done, DONE))
        # The rest end with their reason (a step cancelled, or one that cannot be rendered):
        # a batch per reason, not a drip at a time (an operator who cancels a step's jobs
        # ends every drip waiting on them at the next pass).
        ending: dict[tuple[str, str], list[EnrollmentRow]] = {}
        for row, state, reason in finished:
            if state != DONE:
                ending.setdefault((state, reason or state), []).append(row)
        for (state, reason), rows in sorted(ending.items()):
            ended, _ = end_drips(conn, name, step_ids, rows, state, reason=reason, actor=actor)
            report.ended += ended
        if jobs:
            report.materialised += outbox.enqueue(conn, jobs)


def _by_id(entry: tuple[_Next, NewJob]) -> int:
    return entry[0].row.id


def _compose(
    loaded: LoadedCampaign, steps: list[CompiledStep], planner: Planner, item: _Next
) -> NewJob:
    row = item.row
    index = row.next_step
    planned = planner.step(index, item.anchor, row.timezone)
    recipient = Recipient(row.recipient, row.name, dict(row.variables), 0)
    return compose_job(
        loaded,
        steps[index],
        recipient,
        row.enrolled_at,
        not_before=planned.not_before,
        send_window=planned.send_window,
    )
