"""Read-only views (``herald status``, the metrics' outbox reading, the dashboard's reads, the
feedback summary, the suppression list, a prune's dry run and its size figures) use
``herald.db.reading``: they never wait for a writer that holds its transaction open. On SQLite
every other transaction takes the writer's lock to begin, and a busy writer starves it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dispatch.models import send_job
from dispatch.store import OutboxStore
from herald.app.feedback import feedback_summary
from herald.app.prune import PruneOptions, prune, start, table_sizes
from herald.app.status import status
from herald.app.suppress import list_entries
from herald.db import reading
from herald.metrics_outbox import read_outbox
from tests.support.outboxes import new_job

# Far below SQLite's 30 s busy timeout: a reader that waited for the writer misses it.
DEADLINE_SECONDS = 10.0


def _within_deadline(read: Callable[[], Any]) -> Any:
    done = threading.Event()
    result: list[Any] = []

    def run() -> None:
        try:
            result.append(read())
        except BaseException as exc:  # reported below, with the thread's own error
            result.append(exc)
        finally:
            done.set()

    threading.Thread(target=run, daemon=True).start()
    assert done.wait(DEADLINE_SECONDS), "the reader waited for the writer"
    (value,) = result
    assert not isinstance(value, BaseException), value
    return value


def test_readers_see_the_last_commit_while_a_writer_holds_its_transaction(
    engine: Engine,
) -> None:
    when = datetime(2026, 1, 1, tzinfo=UTC)
    with engine.begin() as conn:
        OutboxStore(engine.dialect.name).enqueue(conn, [new_job(f"k{i}", when) for i in range(3)])
    with engine.begin() as writer:
        writer.execute(sa.update(send_job).values(state="cancelled"))  # not committed yet

        def count_pending() -> int:
            with reading(engine) as conn:
                return int(
                    conn.scalar(sa.select(sa.func.count()).where(send_job.c.state == "pending"))
                    or 0
                )

        assert _within_deadline(count_pending) == 3
        snapshot = _within_deadline(lambda: status(engine))
        outbox = _within_deadline(lambda: read_outbox(engine, when))
    assert snapshot is not None
    assert sum(outbox.jobs.values()) == 3


def test_operator_reports_answer_while_a_writer_holds_its_transaction(engine: Engine) -> None:
    when = datetime(2026, 1, 1, tzinfo=UTC)
    with engine.begin() as conn:
        OutboxStore(engine.dialect.name).enqueue(conn, [new_job(f"k{i}", when) for i in range(3)])
    dry_run = PruneOptions(older_than=timedelta(days=90), dry_run=True)
    with engine.begin() as writer:
        writer.execute(sa.update(send_job).values(state="cancelled"))  # not committed yet

        summary = _within_deadline(lambda: feedback_summary(engine))
        suppressed = _within_deadline(lambda: list_entries(engine))
        sizes = _within_deadline(lambda: table_sizes(engine))
        report = _within_deadline(lambda: prune(engine, dry_run, start(engine, dry_run), actor="t"))
    assert sum(summary.counts.values()) == 0
    assert suppressed == []
    assert sizes
    assert report.dry_run
    assert report.jobs == 0  # nothing is settled, so nothing is eligible
