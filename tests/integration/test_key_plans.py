"""Statements that find jobs by key read send_key once, whatever the planner estimates.

Herald plans generically on PostgreSQL (herald.db) and a launch fills the outbox long before
autovacuum analyses it. As a semi-join (``id IN (SELECT job_id FROM send_key …)``), a
statement guarded by state was planned as a nested loop that read all of send_key once for
EACH job in that state: withdrawing 500 keys of 2,000 jobs took 42 s, and the time grew with
the square of the outbox. ``dispatch.outbox.keyed`` asks send_key for the ids once, first (an
InitPlan). The property tests hold both databases' forms to plain set membership, for keys
made of any characters, LIKE's wildcards and escapes included.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.engine import Engine

from dispatch.key_lookup import match_prefix
from dispatch.models import send_job
from dispatch.outbox.keyed import with_key_prefix, with_keys
from dispatch.outbox.versions import superseded_keys
from dispatch.store import OutboxStore
from scheduler.job_lookup import outcomes
from tests.support.examples import examples
from tests.support.outboxes import new_job
from tests.support.plans import explained

J = send_job.c
LATER = datetime.now(UTC) + timedelta(hours=1)
JOBS = 2000
KEYS = [f"{i:064x}" for i in range(JOBS)]
ASKED = KEYS[::4]  # 500: one statement's worth


def _unanalysed(engine: Engine) -> OutboxStore:
    """2,000 pending jobs on PostgreSQL, in tables autovacuum never analyses."""
    if engine.dialect.name != "postgresql":
        pytest.skip("a PostgreSQL planner choice")
    store = OutboxStore("postgresql")
    with engine.begin() as conn:
        for table in ("send_job", "send_key"):
            conn.exec_driver_sql(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
        store.enqueue(conn, [new_job(key, LATER) for key in KEYS])
    return store


def _plans_of(engine: Engine, run: Callable[[sa.Connection], Any]) -> tuple[Any, list[str]]:
    """What ``run`` returns, and the plan of each statement it ran that reads send_key."""
    reading_send_key = explained(engine, lambda statement: "FROM send_key" in statement)
    with reading_send_key as plans, engine.begin() as conn:
        result = run(conn)
    return result, plans


def _reads_send_key_once(plans: list[str]) -> None:
    assert plans
    for plan in plans:
        assert "InitPlan" in plan, plan  # the ids, asked for once
        assert "Loop" not in plan, plan  # no nested loop over anything
        assert "Join" not in plan, plan


def test_withdrawing_many_keys_reads_send_key_once(engine: Engine) -> None:
    store = _unanalysed(engine)
    withdrawn, plans = _plans_of(
        engine, lambda conn: store.withdraw(conn, ASKED, reason="left", actor="s")
    )
    assert withdrawn == len(ASKED)
    _reads_send_key_once(plans)


def _retry_dead(conn: sa.Connection) -> int:
    store = OutboxStore("postgresql")
    return len(store.retry_dead(conn, keys=ASKED, campaign=None, actor="o"))


@pytest.mark.parametrize(
    ("lookup", "expected"),
    [
        pytest.param(lambda conn: len(outcomes(conn, ASKED)), len(ASKED), id="drip outcomes"),
        pytest.param(lambda conn: len(superseded_keys(conn, ASKED)), 0, id="superseded keys"),
        pytest.param(
            lambda conn: len(OutboxStore("postgresql").pruned_keys(conn, ASKED)), 0, id="pruned"
        ),
        pytest.param(_retry_dead, 0, id="operator by keys"),  # none is dead: the plan counts
        pytest.param(lambda conn: match_prefix(conn, KEYS[7]), KEYS[7], id="a key prefix"),
    ],
)
def test_every_lookup_by_key_reads_send_key_once(
    engine: Engine, lookup: Callable[[sa.Connection], Any], expected: Any
) -> None:
    _unanalysed(engine)
    found, plans = _plans_of(engine, lookup)
    assert found == expected
    _reads_send_key_once(plans)


# ------------------------------------------------------------- the forms mean set membership

# Keys an operator may type: any characters, LIKE's wildcards and escape among them.
KEY_TEXT = st.text(
    st.one_of(st.sampled_from("%_\\'\"aAbB/ "), st.characters(exclude_categories=["Cs"])),
    min_size=1,
    max_size=8,
).filter(lambda key: "\x00" not in key)  # PostgreSQL text holds no NUL; keys are never one
POPULATION = st.lists(KEY_TEXT, min_size=1, max_size=12, unique=True)


def _populate(engine: Engine, keys: list[str]) -> set[str]:
    """Enqueue a job for each of ``keys``; every key the outbox now holds (earlier examples'
    too: the database lives for the whole test)."""
    store = OutboxStore(engine.dialect.name)
    with engine.begin() as conn:
        store.enqueue(conn, [new_job(key, LATER) for key in keys])
        return set(conn.execute(sa.select(J.key)).scalars())


SETTINGS = settings(
    max_examples=examples(25),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


@SETTINGS
@given(population=POPULATION, data=st.data())
def test_with_keys_selects_exactly_the_jobs_of_those_keys(
    engine: Engine, population: list[str], data: st.DataObject
) -> None:
    held = _populate(engine, population)
    asked = data.draw(st.lists(st.one_of(st.sampled_from(population), KEY_TEXT), max_size=10))
    with engine.connect() as conn:
        found = conn.execute(sa.select(J.key).where(with_keys(asked))).scalars().all()
        others = conn.execute(sa.select(J.key).where(~with_keys(asked))).scalars().all()
    assert sorted(found) == sorted(held & set(asked))
    assert sorted(others) == sorted(held - set(asked))


@SETTINGS
@given(population=POPULATION, data=st.data())
def test_with_key_prefix_selects_exactly_the_keys_starting_so(
    engine: Engine, population: list[str], data: st.DataObject
) -> None:
    held = _populate(engine, population)
    prefix = data.draw(
        st.one_of(
            st.sampled_from(population).map(lambda k: k[:2]),
            st.sampled_from(population).map(str.swapcase),  # SQLite's LIKE ignores ASCII case
            KEY_TEXT,
        )
    )
    with engine.connect() as conn:
        found = conn.execute(sa.select(J.key).where(with_key_prefix(prefix))).scalars().all()
    assert sorted(found) == sorted(k for k in held if k.startswith(prefix))
