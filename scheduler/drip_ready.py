"""Which active enrollments a drip pass reads: those that may be ready for their next step.

A drip waits on its previous step's job until it is sent, failed or cancelled
(``scheduler.drip``). Reading every active enrollment at every pass, to look up each one's
previous job by key in Python, cost about 30 µs an enrollment: 30 s a pass for a million
drips, at a tick of 30 s. The database answers instead, one index probe per enrollment
(bench/profiles/fanout.md, session 39).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import sqlalchemy as sa

from dispatch.models import send_job, send_key
from dispatch.outbox.sqlcore import bound_state
from scheduler.enrollment_store import ACTIVE, COLUMNS, EnrollmentRow, enrollment_row
from scheduler.models import enrollment_table

E = enrollment_table.c

# The states of a drip's previous step that end its wait (scheduler.drip: moved on, done or
# ended); any other state, or no job yet, keeps it waiting.
WAIT_ENDS: Final = ("sent", "failed", "cancelled")


def _ready_page(steps: int) -> sa.Select[Any]:
    """``ReadyPages.page``'s statement for a drip of ``steps`` steps.

    The previous step's job is found by what its key is made of (campaign, step, occurrence =
    ``enrolled_at``, mailbox: send_key's unique index), counted in a scalar sub-select: never
    turned into a join, so each enrollment costs one probe of that index and one of send_job's
    primary key, whatever the statistics. Its states are bound (a search by id:
    ``sqlcore.guard``). Any job of those four that ended the wait lets the enrollment through,
    so the page holds every enrollment the pass would move or end (it decides from the job of
    the key); it may hold more.
    """
    K, J = send_key.c, send_job.c
    previous: sa.ColumnElement[Any] = sa.null()
    if steps:
        names = {i + 1: sa.bindparam(f"step_{i}", type_=sa.String()) for i in range(steps)}
        previous = sa.case(names, value=E.next_step, else_=sa.null())
    settled = (
        sa.select(sa.func.count())
        .select_from(send_key.join(send_job, J.id == K.job_id))
        .where(
            K.campaign == E.campaign,
            K.step == previous,
            K.occurrence_at == E.enrolled_at,
            K.mailbox == E.mailbox,
            J.state.in_(bound_state(list(WAIT_ENDS))),
        )
        .scalar_subquery()
    )
    return (
        sa.select(*COLUMNS)
        .where(
            E.campaign == sa.bindparam("campaign"),
            E.state == ACTIVE,
            E.id > sa.bindparam("after_id"),
            sa.or_(E.next_step == 0, previous.is_(None), settled > 0),
        )
        .order_by(E.id)
        .limit(sa.bindparam("limit"))
    )


class ReadyPages:
    """The ready pages of drips, one statement kept for each number of steps."""

    def __init__(self) -> None:
        self._statements: dict[int, sa.Select[Any]] = {}

    def page(
        self,
        conn: sa.Connection,
        campaign: str,
        step_ids: Sequence[str],
        *,
        after_id: int,
        limit: int,
    ) -> list[EnrollmentRow]:
        """Active enrollments with id > ``after_id``, by id, that may be ready for their next
        step: not started yet, past the campaign's steps, or whose previous step's job is sent,
        failed or cancelled. Those still waiting are not read at all: an idle pass over a
        drip costs a probe per enrollment in the database, not a row decoded in Python."""
        statement = self._statements.get(len(step_ids))
        if statement is None:
            statement = self._statements[len(step_ids)] = _ready_page(len(step_ids))
        params: dict[str, Any] = {"campaign": campaign, "after_id": after_id, "limit": limit}
        params.update({f"step_{i}": step for i, step in enumerate(step_ids)})
        return [enrollment_row(r) for r in conn.execute(statement, params)]
