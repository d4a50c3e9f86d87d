"""What every SQL concern of the outbox shares: the job columns, the guard and journal derived
from ``dispatch.states``, the campaign and suppression filters.

Every transition is one conditional ``UPDATE … WHERE <guard> RETURNING`` and writes its
``send_event`` rows in the same transaction. The guard's state test and the journal's from/to
both come from a ``Transition``, never from literals at the call site.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite

from dbtypes import db_now, utc
from dispatch.models import GLOBAL_SCOPE, send_event, send_job, suppression
from dispatch.outbox.gate import CampaignGate
from dispatch.outbox.jobs import Deferral, Lease
from dispatch.outbox.keyed import with_keys
from dispatch.states import State, Transition

J = send_job.c

JournalRow = tuple[int, int, str | None]  # (job id, token, detail)


def guard(
    transition: Transition, source: State | None = None, *, bound: bool = False
) -> sa.ColumnElement[bool]:
    """``state = <source>``, or ``state IN <sources>`` when no single source is named.

    ``source`` selects one of the transition's sources (statements that run once per source so
    each journal row names where its job came from). The states are written into the SQL, as
    every value compared to ``state`` is (``dbtypes.IndexedChoice``), so a search by state can
    use the partial index of those states. ``bound``: for a statement that finds its rows by
    id, key or lease, the states are bound instead. A written-in state would offer PostgreSQL
    that partial index too, and right after a launch, with no statistics, it takes it: a scan
    of every job in the state, hashed against the batch, instead of one primary-key probe per
    job (tests/integration/test_claim_plan.py).
    """
    if source is None and len(transition.sources) == 1:
        source = transition.source
    if source is not None:
        transition.check(source)
        return J.state == (bound_state(source.value) if bound else source.value)
    values = sorted(s.value for s in transition.sources)
    return J.state.in_(bound_state(values) if bound else values)


def bound_state(value: str | list[str]) -> sa.BindParameter[Any]:
    """A state, or a list of states for ``IN``, as a bound value rather than written into the
    SQL (see ``guard``: for statements that find their rows by id, key or lease)."""
    return sa.bindparam(None, value, type_=sa.String(), expanding=isinstance(value, list))


def journal(
    conn: sa.Connection,
    transition: Transition,
    rows: Sequence[JournalRow],
    actor: str,
    *,
    source: State | None = None,
) -> None:
    """Append one event per row, from ``source`` (default: the transition's single source)."""
    journal_each(conn, [(transition, rows)], actor, source=source)


def journal_each(
    conn: sa.Connection,
    parts: Sequence[tuple[Transition, Sequence[JournalRow]]],
    actor: str,
    *,
    source: State | None = None,
) -> None:
    """One INSERT for the events of several transitions (a statement that took more than one)."""
    if conn.dialect.name == "sqlite":
        _journal_sqlite(conn, parts, actor, source)
    else:
        _journal_core(conn, parts, actor, source)


def _journal_core(
    conn: sa.Connection,
    parts: Sequence[tuple[Transition, Sequence[JournalRow]]],
    actor: str,
    source: State | None,
) -> None:
    """The INSERT as a Core statement (PostgreSQL: SQLAlchemy's insertmanyvalues batches it)."""
    params: list[dict[str, Any]] = []
    for transition, rows in parts:
        if not rows:
            continue
        origin = _origin(transition, source)
        params += [
            {
                "job_id": job_id,
                "token": token,
                "from_state": None if origin is None else origin.value,
                "to_state": transition.target.value,
                "detail": detail,
            }
            for job_id, token, detail in rows
        ]
    if params:
        conn.execute(sa.insert(send_event).values(at=db_now(), actor=actor), params)


def _origin(transition: Transition, source: State | None) -> State | None:
    origin = transition.source if source is None and transition.sources else source
    transition.check(origin)
    return origin


def _journal_statement() -> tuple[str, tuple[str, ...]]:
    """The journal INSERT as SQLite text and the order of its ``?`` parameters."""
    stmt = sa.insert(send_event).values(
        {name: sa.bindparam(name) for name in JOURNAL_PARAMS} | {"at": db_now()}
    )
    compiled = stmt.compile(dialect=sqlite.dialect())
    assert compiled.positiontup is not None
    return compiled.string, tuple(compiled.positiontup)


JOURNAL_PARAMS = ("job_id", "token", "from_state", "to_state", "actor", "detail")
_SQLITE_JOURNAL, _SQLITE_JOURNAL_ORDER = _journal_statement()
# The rows below are built in this order; a change in how SQLAlchemy orders them fails here.
assert _SQLITE_JOURNAL_ORDER == JOURNAL_PARAMS, _SQLITE_JOURNAL_ORDER
# Values as ForeignText stores them (NUL shown as ``\x00``), as a bound detail would be.
_DETAIL = send_event.c.detail.type.dialect_impl(sqlite.dialect()).bind_processor(sqlite.dialect())


def _journal_sqlite(
    conn: sa.Connection,
    parts: Sequence[tuple[Transition, Sequence[JournalRow]]],
    actor: str,
    source: State | None,
) -> None:
    """The same rows through one constant statement, executemany'd by the driver with plain
    tuples: SQLAlchemy's per-row parameter processing cost more than SQLite's insert (the drain
    writes three events per job)."""
    rows: list[tuple[Any, ...]] = []
    process = _DETAIL
    for transition, done in parts:
        if not done:
            continue
        origin = _origin(transition, source)
        from_state = None if origin is None else origin.value
        to_state = transition.target.value
        rows += [
            (
                job_id,
                token,
                from_state,
                to_state,
                actor,
                # ForeignText's processing rewrites only NUL: tested here, not called per row.
                detail
                if process is None or detail is None or "\x00" not in detail
                else process(detail),
            )
            for job_id, token, detail in done
        ]
    if rows:
        conn.exec_driver_sql(_SQLITE_JOURNAL, rows)


def leases_in(leases: Iterable[Lease]) -> sa.ColumnElement[bool]:
    """These jobs, each still under the given lease token.

    The ``id IN (…)`` term is what the planner searches by: SQLite plans a row-value
    ``(id, lease_token) IN (VALUES …)`` as a SCAN of send_job (every batch would read the whole
    outbox). The tuple test beside it is the fence: a job re-leased since holds another token.
    """
    listed = list(leases)
    return sa.and_(
        J.id.in_([job_id for job_id, _ in listed]), sa.tuple_(J.id, J.lease_token).in_(listed)
    )


def suppressed() -> sa.Exists:
    """The job's mailbox is suppressed everywhere (``global``) or for its campaign's list.

    On the mailbox identity, never the spelling: a suppressed mailbox stays suppressed however
    an audience writes it. A job whose ``list_scope`` is NULL (transactional mail, jobs made
    before migration 0006) matches ``global`` only: ``scope = NULL`` is never true.
    """
    return sa.exists().where(
        suppression.c.address == J.mailbox,
        sa.or_(suppression.c.scope == GLOBAL_SCOPE, suppression.c.scope == J.list_scope),
    )


class CampaignFilters:
    """The campaign-status predicates, built from a ``CampaignGate``."""

    def __init__(self, gate: CampaignGate) -> None:
        self.gate = gate
        table = gate.clause()
        self._name = table.c[gate.name_column]
        self._status = table.c[gate.status_column]

    def not_active(self) -> sa.Exists:
        return sa.exists().where(self._name == J.campaign, self._status != self.gate.active)

    def has_status(self, status: str) -> sa.Exists:
        return sa.exists().where(self._name == J.campaign, self._status == status)

    def active(self) -> sa.ColumnElement[bool]:
        """``campaign NOT IN (inactive names)``: a hashed subplan, planned well without statistics.

        The equivalent ``NOT EXISTS`` becomes an anti-join whose estimate, on a campaign table
        that was never analysed (autovacuum skips tables under 50 changed rows), makes
        PostgreSQL sort the whole pending backlog on every claim instead of reading the due
        index in order.
        """
        inactive = sa.select(self._name).where(self._status != self.gate.active)
        active: sa.ColumnElement[bool] = J.campaign.not_in(inactive)
        return active


def selection(keys: Sequence[str] | None, campaign: str | None) -> list[sa.ColumnElement[bool]]:
    """The operator's selection: these keys, this campaign, or both."""
    clauses: list[sa.ColumnElement[bool]] = []
    if keys is not None:
        clauses.append(with_keys(keys))
    if campaign is not None:
        clauses.append(J.campaign == campaign)
    return clauses


def returned(rows: Iterable[Any], detail: str | None = None) -> list[JournalRow]:
    """Journal rows from ``RETURNING id, lease_token`` rows, all with the same detail."""
    return [(r.id, r.lease_token, detail) for r in rows]


def hand_back_until(
    conn: sa.Connection,
    deferrals: Sequence[Deferral],
    transition: Transition,
    why: str,
    actor: str,
) -> set[int]:
    """Claimed → pending, each job due again at its own ``not_before``, guarded by token; the
    claim is not counted (W2 a closed send window, W3 no rate-limit slot: neither is a sign of
    a job that kills its workers). Jobs sharing a time share one statement."""
    by_time: dict[datetime, list[Lease]] = {}
    for deferral in deferrals:
        by_time.setdefault(deferral.not_before, []).append(deferral.lease)
    done: set[int] = set()
    for not_before, leases in sorted(by_time.items()):
        stmt = (
            sa.update(send_job)
            .where(leases_in(leases), guard(transition, bound=True))
            .values(
                state=transition.target.value,
                claims=J.claims - 1,
                not_before=utc(not_before),
                lease_owner=None,
                lease_expires_at=None,
                updated_at=db_now(),
            )
            .returning(J.id, J.lease_token)
        )
        rows = returned(conn.execute(stmt), f"{why}; due {not_before.isoformat()}")
        journal(conn, transition, rows, actor)
        done |= {job_id for job_id, _, _ in rows}
    return done
