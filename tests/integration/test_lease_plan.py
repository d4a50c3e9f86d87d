"""A batch of leases is found by primary key, never by reading the whole outbox.

Every T4, T5, heartbeat and release batch addresses its jobs through ``leases_in``. SQLite plans
a bare row-value ``(id, lease_token) IN (VALUES …)`` as a SCAN of send_job: each batch would
cost the size of the outbox, not of the batch.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dispatch.models import send_job
from dispatch.outbox.sqlcore import leases_in


def _plan(engine: Engine, stmt: sa.Select[Any]) -> str:
    sql = str(stmt.compile(engine, compile_kwargs={"literal_binds": True}))  # integers only
    with engine.begin() as conn:
        if engine.dialect.name == "sqlite":
            return "\n".join(
                str(row[-1]) for row in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql)
            )
        conn.exec_driver_sql("SET LOCAL enable_seqscan = off")  # a tiny table: any index will do
        return "\n".join(str(row[0]) for row in conn.exec_driver_sql("EXPLAIN " + sql))


def test_a_lease_batch_is_a_primary_key_search(engine: Engine) -> None:
    leases = [(7, 70), (3, 30), (2**62, 2**62 + 1)]
    plan = _plan(engine, sa.select(send_job.c.id).where(leases_in(leases)))
    if engine.dialect.name == "sqlite":
        assert "SCAN send_job" not in plan, plan
        assert "INTEGER PRIMARY KEY" in plan, plan
    else:
        assert "Seq Scan" not in plan, plan
        assert "Index" in plan, plan
