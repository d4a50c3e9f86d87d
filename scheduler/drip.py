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

from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from campaigns.audience import Recipient
from campaigns.control import CampaignConflict
from campaigns.spec import LoadedCampaign
from campaigns.store import CampaignStore
from dispatch.store import NewJob, OutboxStore
from scheduler.compose import CompiledStep, compose_job
from scheduler.drip_ready import ReadyPages
from scheduler.enrollment import drip_keys, end_drips
from scheduler.enrollment_store import DONE, ENDED, EnrollmentRow, EnrollmentStore
from scheduler.job_lookup import JobOutcome, outcomes
from scheduler.planning import Planner
from templates.errors import TemplateError

PAGE = 500  # enrollments per read and per transaction
SETTLED = ("sent", "failed")
CANCELLED = "cancelled"


@dataclass
class DripReport:
    materialised: int = 0  # step jobs inserted
    waiting: int = 0  # drips read whose previous step turned out not to have settled yet
    done: int = 0
    ended: int = 0  # a step was cancelled, or cannot be rendered
    problems: list[str] | None = None  # rendering problems (the drip ended)


@dataclass(frozen=True)
class _Next:
    row: EnrollmentRow
    anchor: datetime  # step next_step counts from here


def advance_drips(
    engine: Engine,
    loaded: LoadedCampaign,
    steps: list[CompiledStep],
    *,
    actor: str,
    page: int = PAGE,
) -> DripReport:
    """Materialise the next step of every active enrollment that is ready for it."""
    report = DripReport()
    pages = ReadyPages()
    planner = Planner(loaded.spec)
    name = loaded.spec.name
    step_ids = [step.spec.id for step in steps]
    after_id = 0
    while True:
        with engine.connect() as conn:
            rows = pages.page(conn, name, step_ids, after_id=after_id, limit=page)
            previous = _previous_outcomes(conn, name, step_ids, rows)
        if not rows:
            return report
        after_id = rows[-1].id
        ready: list[_Next] = []
        finished: list[tuple[EnrollmentRow, str, str | None]] = []
        for row in rows:
            decision = _decide(row, step_ids, previous)
            if isinstance(decision, datetime):
                ready.append(_Next(row, decision))
            elif decision is None:
                report.waiting += 1
            else:
                finished.append((row, *decision))
        _write(engine, loaded, steps, planner, ready, finished, actor, report)


def _previous_outcomes(
    conn: sa.Connection, name: str, step_ids: list[str], rows: list[EnrollmentRow]
) -> dict[int, JobOutcome | None]:
    """enrollment id -> the job of its last materialised step (None: not found)."""
    keys = {
        row.id: drip_keys(name, step_ids, row, row.next_step)[-1]
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
    ready: list[_Next],
    finished: list[tuple[EnrollmentRow, str, str | None]],
    actor: str,
    report: DripReport,
) -> None:
    if not ready and not finished:
        return
    name = loaded.spec.name
    step_ids = [step.spec.id for step in steps]
    store = EnrollmentStore(engine.dialect.name)
    outbox = OutboxStore(engine.dialect.name)
    composed: list[tuple[_Next, NewJob]] = []
    for item in ready:
        try:
            composed.append((item, _compose(loaded, steps, planner, item)))
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
