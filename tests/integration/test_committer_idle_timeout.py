"""A worker frozen in the middle of a transaction, once the server has ended that transaction
(``idle_in_transaction_session_timeout``, docs/operations/postgresql.md, "A frozen worker"):
the frozen batch fails as after a lost connection, nothing of it is committed, and the lane's
next transaction runs on a fresh connection. PostgreSQL only: the setting is PostgreSQL's."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dispatch.models import send_job
from dispatch.outbox_client import OutboxClient
from tests.integration.test_committer_lanes import DEADLINE, committer_for, enqueue


def _gone(engine: Engine, backend: int) -> bool:
    with engine.connect() as conn:
        query = sa.text("SELECT count(*) FROM pg_stat_activity WHERE pid = :pid")
        left: int = conn.execute(query, {"pid": backend}).scalar_one()
        return left == 0


def test_a_batch_frozen_past_the_servers_idle_timeout_fails_whole_and_the_lane_goes_on(
    pg: Engine,
) -> None:
    with pg.connect() as conn:
        database = conn.exec_driver_sql("SELECT current_database()").scalar_one()
        conn.exec_driver_sql(
            f'ALTER DATABASE "{database}" SET idle_in_transaction_session_timeout = 200'
        )
        conn.commit()
    pg.dispose()  # the setting applies to sessions that start from now on
    enqueue(pg, 3)
    committer = committer_for(pg, lanes=1)
    original = committer._apply
    frozen_once = threading.Event()

    def frozen(conn: sa.Connection, batch: list[Any]) -> list[Any]:
        if not frozen_once.is_set():
            frozen_once.set()
            backend = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
            deadline = time.monotonic() + DEADLINE
            while not _gone(pg, backend):  # the worker is frozen until the server ends it
                assert time.monotonic() < deadline, "the server never ended the idle transaction"
                time.sleep(0.01)
        result: list[Any] = original(conn, batch)
        return result

    committer._apply = frozen  # type: ignore[method-assign]

    async def main() -> tuple[BaseException | list[Any], list[Any]]:
        client = OutboxClient(committer)
        committer.start()
        try:
            first: BaseException | list[Any]
            try:
                first = await asyncio.wait_for(client.claim(3), DEADLINE)
            except Exception as exc:  # what the frozen batch's requests see
                first = exc
            second = await asyncio.wait_for(client.claim(3), DEADLINE)
            return first, second
        finally:
            await asyncio.to_thread(committer.stop)

    first, second = asyncio.run(main())

    assert isinstance(first, sa.exc.DBAPIError), first
    assert "idle-in-transaction timeout" in str(first)
    assert len(second) == 3  # the frozen claim committed nothing: all three claimable again
    with pg.connect() as conn:
        claims = conn.execute(sa.select(sa.func.sum(send_job.c.claims))).scalar_one()
    assert claims == 3
