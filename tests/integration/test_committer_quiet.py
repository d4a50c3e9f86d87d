"""``GroupCommitter.quiet``: true only while every lane waits for work, so a worker frozen then
holds no transaction open (the chaos suite's zombie, tests/chaos/instruments.py). On both
databases: PostgreSQL's committer has two lanes, SQLite's one."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dispatch.outbox_client import OutboxClient
from tests.integration.test_committer_lanes import DEADLINE, committer_for, enqueue


async def until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + DEADLINE
    while not condition():  # a state of the database threads: polled
        assert time.monotonic() < deadline, "the committer never went quiet"
        await asyncio.sleep(0.001)


def test_quiet_only_while_no_transaction_is_open(engine: Engine) -> None:
    enqueue(engine, 3)
    committer = committer_for(engine)
    in_transaction = threading.Event()
    may_commit = threading.Event()
    original = committer._apply

    def held_open(conn: sa.Connection, batch: list[Any]) -> list[Any]:
        in_transaction.set()
        assert may_commit.wait(DEADLINE)
        result: list[Any] = original(conn, batch)
        return result

    committer._apply = held_open  # type: ignore[method-assign]

    async def main() -> None:
        client = OutboxClient(committer)
        assert not committer.quiet(), "no lane is waiting for work before the committer starts"
        committer.start()
        try:
            await until(committer.quiet)
            claim = asyncio.ensure_future(client.claim(3))
            assert await asyncio.to_thread(in_transaction.wait, DEADLINE)
            assert not committer.quiet()  # the claim's transaction is open
            queued = asyncio.ensure_future(client.has_work(60.0))
            await asyncio.sleep(0.05)  # handed over: it waits in the queue behind the claim
            assert not committer.quiet()
            may_commit.set()
            assert len(await asyncio.wait_for(claim, DEADLINE)) == 3
            assert await asyncio.wait_for(queued, DEADLINE) is True
            await until(committer.quiet)
        finally:
            may_commit.set()
            await asyncio.to_thread(committer.stop)

    asyncio.run(main())
