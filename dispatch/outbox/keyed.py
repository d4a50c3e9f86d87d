"""Finding jobs by key: through ``send_key``, whose unique index holds every key once.

send_job has no index on ``key`` on PostgreSQL since migration 0009 (an index there was
re-inserted by every transition), so a statement that selects jobs by key asks send_key for
their ids and reads send_job by primary key.

On PostgreSQL the ids are asked for once, before send_job is read (``with_keys``): as a
semi-join, ``id IN (SELECT job_id …)`` leaves the join's order to the planner's estimates, and
Herald plans generically (``plan_cache_mode = force_generic_plan``, herald.db) over tables a
launch has just filled, before any ANALYZE. It then estimated one row of send_job in the
guarded state and read all of send_key once for EACH job (a nested loop): withdrawing 500 keys
of 2,000 jobs took 42 s, quadratic in the outbox's size (tests/integration/test_key_plans.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.visitors import InternalTraversal

from dispatch.models import send_job, send_key

J = send_job.c
K = send_key.c


def job_of(key: Any) -> sa.ScalarSelect[Any]:
    """The id of the job with this key (a bound parameter or a column), as a subquery."""
    return sa.select(K.job_id).where(K.key == key).scalar_subquery()


class _WithIds(ColumnElement[bool]):
    """``send_job.id`` among the ids ``ids`` (a SELECT of one column) finds, read once.

    PostgreSQL: ``send_job.id = ANY (ARRAY(SELECT …))``, an uncorrelated sub-select that runs
    once, as an InitPlan, before send_job is read by primary key or scanned once: never a
    join whose order estimates choose. Anywhere else (SQLite, which plans with the bound
    values and reads send_key's index): ``send_job.id IN (SELECT …)``.
    """

    type = sa.Boolean()
    inherit_cache = True
    _is_implicitly_boolean = True  # a condition, as IN is: never "… = 1" where no BOOLEAN
    # What the statement cache's key is made of, and where it finds the bound keys (a list,
    # as SQLAlchemy declares it).
    _traverse_internals = [("ids", InternalTraversal.dp_clauseelement)]  # noqa: RUF012

    def __init__(self, ids: sa.Select[Any]) -> None:
        self.ids = ids


@compiles(_WithIds, "postgresql")
def _with_ids_postgresql(element: _WithIds, compiler: SQLCompiler, **kw: Any) -> str:
    ids = compiler.process(element.ids, **{**kw, "asfrom": False})
    return f"({compiler.process(J.id, **kw)} = ANY (ARRAY({ids})))"


@compiles(_WithIds)
def _with_ids_default(element: _WithIds, compiler: SQLCompiler, **kw: Any) -> str:
    return compiler.process(J.id.in_(element.ids), **kw)


def with_keys(keys: Sequence[str]) -> sa.ColumnElement[bool]:
    """The jobs of these keys (see the module's docstring for the form on PostgreSQL)."""
    return _WithIds(sa.select(K.job_id).where(K.key.in_(list(keys))))


def with_key_prefix(prefix: str) -> sa.ColumnElement[bool]:
    """The jobs whose key starts with ``prefix``: LIKE (escaped) finds them in send_key's
    index, and the first characters compared exactly keep them, since SQLite's LIKE ignores
    the case of ASCII letters."""
    starts = sa.and_(
        K.key.startswith(prefix, autoescape=True),
        sa.func.substr(K.key, 1, len(prefix)) == prefix,
    )
    return _WithIds(sa.select(K.job_id).where(starts))
