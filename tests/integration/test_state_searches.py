"""Searches by state use the partial state indexes, on both databases, with no statistics.

Every partial index of the outbox is predicated on ``send_job.state``, and a planner proves such
a predicate only from the query's own terms: ``state = 'claimed'`` written into the SQL, not
``state = $1``. Herald's PostgreSQL connections plan every parameterised statement generically
(``plan_cache_mode = force_generic_plan``, herald.db), so a bound state made every search by
state read the whole table: the worker's recovery pass, its idle checks, the claim's count of
anything left, every few seconds, over the whole outbox's history. ``dbtypes.IndexedChoice``
writes any state compared to the column into the SQL; statements that find rows by id bind it
on purpose (``sqlcore.guard(bound=True)``, tests/integration/test_claim_plan.py). SQLite
re-plans a statement with its bound values and was never affected; it is held to the same.
The operator's lists of one state (in doubt, dead letters, the dashboard's pages) are held to it
as well.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import event
from sqlalchemy.dialects import sqlite
from sqlalchemy.engine import Dialect, Engine

from dispatch.models import send_job
from dispatch.states import State
from dispatch.store import NewJob, OutboxStore
from tests.support.outboxes import new_job

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
J = send_job.c


def _jobs(count: int) -> Iterator[NewJob]:
    for i in range(count):
        yield new_job(f"{i:064d}", EPOCH, payload=b"x" * 1800)  # few rows a page: many pages


def _settled_history(engine: Engine, count: int = 3000) -> OutboxStore:
    """``count`` jobs already sent, in a table no statistics were gathered for (as after a
    launch): what every worker's periodic searches run against."""
    store = OutboxStore(engine.dialect.name)
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.exec_driver_sql("ALTER TABLE send_job SET (autovacuum_enabled = false)")
        store.enqueue(conn, list(_jobs(count)))
        conn.exec_driver_sql("UPDATE send_job SET state = 'sent'")  # setup: no transition
    return store


# What a worker runs on its own, whatever it is sending: recovery every few seconds (and the
# held leases it times the next pass by), the idle checks, the claim that finds nothing.
WORKER_SEARCHES: dict[str, Callable[[OutboxStore, sa.Connection], object]] = {
    "recover": lambda store, conn: store.recover(conn, grace_seconds=30, actor="t"),
    "held_leases": lambda store, conn: store.held_leases(conn),
    "has_work": lambda store, conn: store.has_work(conn, 0.0),
    "next_due_in": lambda store, conn: store.next_due_in(conn),
    "claim": lambda store, conn: store.claim(conn, owner="w", limit=50, lease_seconds=60),
}


# What an operator's lists run (``herald in-doubt``, the dead letters, the dashboard's pages),
# with and without a campaign: each reads the jobs of one state, however long the history.
def _jobs_in_state(
    state: State, campaign: str | None
) -> Callable[[OutboxStore, sa.Connection], object]:
    def run(store: OutboxStore, conn: sa.Connection) -> object:
        return store.jobs_in_state(conn, state, campaign=campaign, limit=50)

    return run


OPERATOR_SEARCHES: dict[str, Callable[[OutboxStore, sa.Connection], object]] = {
    f"{state.value}{' of a campaign' if campaign else ''}": _jobs_in_state(state, campaign)
    for state in (State.IN_DOUBT, State.FAILED, State.SENDING, State.PENDING)
    for campaign in (None, "c")
}


@pytest.mark.parametrize("search", sorted(WORKER_SEARCHES))
def test_a_workers_searches_never_read_the_whole_outbox(engine: Engine, search: str) -> None:
    _never_reads_the_whole_outbox(engine, search, WORKER_SEARCHES[search])


@pytest.mark.parametrize("search", sorted(OPERATOR_SEARCHES))
def test_an_operators_lists_never_read_the_whole_outbox(engine: Engine, search: str) -> None:
    _never_reads_the_whole_outbox(engine, search, OPERATOR_SEARCHES[search])


def _never_reads_the_whole_outbox(
    engine: Engine, search: str, run: Callable[[OutboxStore, sa.Connection], object]
) -> None:
    store = _settled_history(engine)
    if engine.dialect.name == "postgresql":
        with engine.begin() as conn:
            before = _sequential_scans(conn)
            run(store, conn)
            scans = _sequential_scans(conn) - before
        assert scans == 0, f"{search}: {scans} sequential scan(s) of send_job"
        return
    plans = _sqlite_plans(engine, lambda conn: run(store, conn))
    assert plans, search
    whole = [
        (statement, step)
        for statement, steps in plans
        for step in steps
        if step.startswith("SCAN send_job") and " USING " not in step
    ]
    assert not whole, f"{search} reads the whole outbox: {whole}"


def _sequential_scans(conn: sa.Connection) -> int:
    # The backend's counts not yet reported: this transaction's, and earlier ones' of the
    # same connection (reported at most once a second), hence a difference.
    return int(
        conn.exec_driver_sql(
            "SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relname = 'send_job'"
        ).scalar_one()
    )


def _sqlite_plans(
    engine: Engine, run: Callable[[sa.Connection], object]
) -> list[tuple[str, list[str]]]:
    """Every statement ``run`` executes, with the steps of its EXPLAIN QUERY PLAN, read as it
    is about to run."""
    plans: list[tuple[str, list[str]]] = []

    def explain(conn: sa.Connection, cursor: Any, statement: str, params: Any, *_: Any) -> None:
        if "send_job" not in statement:
            return
        rows = cursor.connection.execute("EXPLAIN QUERY PLAN " + statement, params).fetchall()
        plans.append((statement, [str(row[-1]) for row in rows]))

    event.listen(engine, "before_cursor_execute", explain)
    try:
        with engine.begin() as conn:
            run(conn)
    finally:
        event.remove(engine, "before_cursor_execute", explain)
    return plans


# ------------------------------------------------------------------ any value, safely

STATES = [state.value for state in State]
# Choices are written into the SQL; anything else must stay a bound value and still compare
# right: quotes, backslashes, SQL, non-ASCII and upper case look-alikes of the choices.
HOSTILE = st.one_of(
    st.sampled_from(STATES),
    st.sampled_from(list(State)),  # the enum itself, a str subclass
    st.sampled_from(["PENDING", "sent'", "sent' OR '1'='1", "x\\'", "ſent", "pendıng", ""]),
    st.text(st.characters(codec="utf-8", blacklist_characters="\x00"), max_size=20),
)


@pytest.fixture
def mixed_states(engine: Engine) -> tuple[Engine, dict[str, int]]:
    """A job in every state (two pending), and how many are in each."""
    store = OutboxStore(engine.dialect.name)
    with engine.begin() as conn:
        store.enqueue(conn, [new_job(f"{i:064d}", EPOCH) for i in range(len(STATES) + 1)])
        ids = conn.execute(sa.select(J.id).order_by(J.id)).scalars().all()
        for job_id, state in zip(ids, [*STATES, State.PENDING.value], strict=True):
            conn.execute(sa.update(send_job).where(J.id == job_id).values(state=state))
    counts = {state: 1 for state in STATES}
    counts[State.PENDING.value] = 2
    return engine, counts


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(value=HOSTILE, others=st.lists(HOSTILE, max_size=4))
def test_any_value_compared_to_state_compares_as_a_value(
    mixed_states: tuple[Engine, dict[str, int]], value: str, others: list[str]
) -> None:
    engine, counts = mixed_states
    chosen = {value, *others}
    with engine.connect() as conn:
        equal = conn.execute(sa.select(sa.func.count()).where(J.state == value)).scalar_one()
        unequal = conn.execute(sa.select(sa.func.count()).where(J.state != value)).scalar_one()
        within = conn.execute(
            sa.select(sa.func.count()).where(J.state.in_(sorted(chosen)))
        ).scalar_one()
        outside = conn.execute(
            sa.select(sa.func.count()).where(J.state.not_in(sorted(chosen)))
        ).scalar_one()
    total = sum(counts.values())
    assert equal == counts.get(value, 0)
    assert unequal == total - equal
    assert within == sum(counts.get(state, 0) for state in chosen)
    assert outside == total - within


DIALECTS: list[Dialect] = [
    sqlite.dialect(),
    sa.create_engine("postgresql+psycopg://herald@localhost/none").dialect,  # no connection
]


@given(value=HOSTILE)
def test_only_a_plain_identifier_is_written_into_the_sql(value: str) -> None:
    """Every state is written in; whatever else is written in is a lower-case ASCII
    identifier, which cannot close the quotes around it."""
    for dialect in DIALECTS:
        compiled = (
            sa.select(J.id)
            .where(J.state == value)
            .compile(dialect=dialect, compile_kwargs={"render_postcompile": True})
        )
        written = not compiled.params
        if value in STATES:
            assert written, (value, str(compiled))
        if written:
            assert f"send_job.state = '{value}'" in str(compiled)
            assert value.isidentifier(), value
            assert value.isascii(), value
            assert value.islower(), value
        else:
            assert list(compiled.params.values()) == [value]
