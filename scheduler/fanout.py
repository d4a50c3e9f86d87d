"""Materialise an occurrence into send jobs: the transactional outbox's only writer (T1).

Each batch is one transaction: insert the rendered jobs with ON CONFLICT DO NOTHING and advance
the occurrence's cursor. A crash mid-fan-out resumes from the cursor; two schedulers firing the
same occurrence at once produce each key once, because the key is UNIQUE.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.engine import Engine

from campaigns.audience import Recipient, RowProblem, iter_audience
from campaigns.spec import LoadedCampaign
from dispatch.store import NewJob, OutboxStore
from scheduler.compose import CompiledStep, compile_steps, compose_job
from scheduler.store import OccurrenceStore

BATCH_SIZE = 500  # jobs per transaction: big enough to amortise the commit, small enough to
# keep SQLite's write lock short and memory flat


@dataclass
class FanoutResult:
    new_jobs: int = 0
    existing_jobs: int = 0
    skipped_rows: int = 0
    steps_done: int = 0


def materialise(
    engine: Engine,
    loaded: LoadedCampaign,
    occurrence_at: datetime,
    *,
    batch_size: int = BATCH_SIZE,
    replace_pending: bool = False,
    progress: Callable[[int], None] | None = None,
) -> FanoutResult:
    """Fan out every step of one occurrence. Templates must already have passed check."""
    outbox = OutboxStore(engine.dialect.name)
    occurrences = OccurrenceStore(engine.dialect.name)
    result = FanoutResult()
    for step in compile_steps(loaded):
        _fan_out_step(
            engine,
            outbox,
            occurrences,
            loaded,
            step,
            occurrence_at,
            batch_size,
            replace_pending,
            progress,
            result,
        )
        result.steps_done += 1
    return result


def _fan_out_step(
    engine: Engine,
    outbox: OutboxStore,
    occurrences: OccurrenceStore,
    loaded: LoadedCampaign,
    step: CompiledStep,
    occurrence_at: datetime,
    batch_size: int,
    replace_pending: bool,
    progress: Callable[[int], None] | None,
    result: FanoutResult,
) -> None:
    name = loaded.spec.name
    with engine.begin() as conn:
        occurrence = occurrences.open(conn, name, step.spec.id, occurrence_at)
    # A finished fan-out is re-walked only for a new version, whose pending jobs change.
    if occurrence.fanout_state == "done" and not replace_pending:
        count = sum(1 for item in iter_audience(loaded) if isinstance(item, Recipient))
        result.existing_jobs += count
        if progress is not None:
            progress(count)
        return
    start = 0 if replace_pending else occurrence.cursor
    position = 0
    batch: list[NewJob] = []

    def flush() -> None:
        with engine.begin() as conn:
            created = outbox.enqueue(conn, batch, replace_pending=replace_pending)
            occurrences.advance(conn, occurrence.id, position, created)
        result.new_jobs += created
        result.existing_jobs += len(batch) - created
        if progress is not None:
            progress(len(batch))
        batch.clear()

    for item in iter_audience(loaded):
        position += 1
        if isinstance(item, RowProblem):
            result.skipped_rows += 1
            continue
        if position <= start:
            result.existing_jobs += 1
            continue
        batch.append(compose_job(loaded, step, item, occurrence_at))
        if len(batch) >= batch_size:
            flush()
    if batch:
        flush()
    with engine.begin() as conn:
        occurrences.close(conn, occurrence.id)
