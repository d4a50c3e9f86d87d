"""Materialise an occurrence into send jobs: the transactional outbox's only writer (T1).

Each batch is one transaction: insert the rendered jobs with ON CONFLICT DO NOTHING and advance
the occurrence's cursor. A crash mid-fan-out resumes from the cursor; two schedulers firing the
same occurrence at once produce each key once, because the key is UNIQUE.

A URL audience is fanned out from the occurrence's snapshot (scheduler.snapshot), never from a
live fetch, so the cursor's positions always refer to the same list. A strict URL audience
whose snapshot holds rejected rows is refused before any job is written.

``launch`` passes the jobs its check already composed (scheduler.spool): fan-out then streams
them from the spool instead of rendering every message a second time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy.engine import Connection, Engine

from campaigns.audience import Recipient, RowProblem, iter_audience
from campaigns.control import CampaignConflict
from campaigns.errors import AudienceError
from campaigns.spec import LoadedCampaign
from campaigns.store import CampaignStore
from dispatch.outbox import bulk_enqueue
from dispatch.store import NewJob, OutboxStore
from scheduler.check_pool import CheckPool
from scheduler.compose import CompiledStep, compile_steps, compose_broadcast
from scheduler.fanout_writer import BatchWriter, PipelinedWriter, SerialWriter, pipelined
from scheduler.occurrence_pool import composed_occurrence
from scheduler.planning import Planner
from scheduler.snapshot import (
    discard_unused_snapshot,
    ensure_snapshot,
    iter_snapshot,
    refuse_strict_rejects,
    snapshotted,
)
from scheduler.spool import JobSpool
from scheduler.store import OccurrenceStore
from scheduler.unsubscribe_links import UnsubscribeLinks
from templates.errors import TemplateError

MAX_PROBLEMS = 20  # rendering problems kept per fan-out
BATCH_SIZE = 500  # jobs per transaction: big enough to amortise the commit, small enough to
# keep SQLite's write lock short and memory flat
# PostgreSQL enqueues a batch by COPY (dispatch.outbox.bulk_enqueue), whose fixed cost per batch
# (staging table, INSERT … SELECT, commit) wants bigger batches; nobody waits on a lock for it.
# 5,000 rendered jobs are a few MB.
POSTGRES_BATCH_SIZE = 5000

# Called with None, or with an open connection to read a snapshot through (scheduler.new_version).
Audience = Callable[[Connection | None], Iterator[Recipient | RowProblem]]


@dataclass
class FanoutResult:
    new_jobs: int = 0
    existing_jobs: int = 0
    skipped_rows: int = 0  # audience rows that could not be used (each counted once)
    # Messages that failed to render for their recipient (a scheduled occurrence's list is not
    # checked before it fans out): skipped, and the first few problems kept to be shown.
    unrendered: int = 0
    problems: list[str] = field(default_factory=list)
    steps_done: int = 0
    processes: int = 1  # that composed its messages (scheduler.occurrence_pool)


def materialise(
    engine: Engine,
    loaded: LoadedCampaign,
    occurrence_at: datetime,
    *,
    batch_size: int | None = None,
    replace_pending: bool = False,
    progress: Callable[[int], None] | None = None,
    composed: JobSpool | None = None,
    per_occurrence: bool = False,
    takeover_after: float | None = None,
    links: UnsubscribeLinks | None = None,
    pool: CheckPool | None = None,
) -> FanoutResult:
    """Fan out every step of one occurrence. Templates must already have passed check.

    ``composed``: the complete spool of a check of this very occurrence (same campaign
    definition, same ``occurrence_at``); its jobs are enqueued as they are.
    ``per_occurrence`` (a scheduled trigger): a CSV audience is snapshotted for the occurrence
    too; ``takeover_after``: see scheduler.snapshot.ensure_snapshot. ``links``: the
    unsubscribe links of marketing messages (scheduler.unsubscribe_links). ``batch_size``:
    jobs per transaction (None: the database's default). ``pool``: a scheduled occurrence's
    messages are composed by its processes first (scheduler.occurrence_pool).
    """
    pooled = None
    if composed is None and pool is not None and per_occurrence:
        pooled = composed_occurrence(
            engine, loaded, occurrence_at, pool=pool, links=links, takeover_after=takeover_after
        )
    with pooled if pooled is not None else nullcontext():
        result = _materialise(
            engine,
            loaded,
            occurrence_at,
            batch_size=batch_size,
            replace_pending=replace_pending,
            progress=progress,
            composed=composed if pooled is None else pooled,
            per_occurrence=per_occurrence,
            takeover_after=takeover_after,
            links=links,
        )
    if pooled is not None and pool is not None:
        result.processes = pool.processes
    return result


def _materialise(
    engine: Engine,
    loaded: LoadedCampaign,
    occurrence_at: datetime,
    *,
    batch_size: int | None,
    replace_pending: bool,
    progress: Callable[[int], None] | None,
    composed: JobSpool | None,
    per_occurrence: bool,
    takeover_after: float | None,
    links: UnsubscribeLinks | None,
) -> FanoutResult:
    if batch_size is None:
        batch_size = POSTGRES_BATCH_SIZE if engine.dialect.name == "postgresql" else BATCH_SIZE
    if composed is not None and not composed.complete:
        raise ValueError("fan-out from an incomplete spool: its check failed or did not finish")
    outbox = OutboxStore(engine.dialect.name)
    occurrences = OccurrenceStore(engine.dialect.name)
    result = FanoutResult()
    steps = compile_steps(loaded, links)
    planner = Planner(loaded.spec)
    stream: Callable[[CompiledStep], Iterator[Item]]
    if composed is not None:
        spool = composed
        stream = lambda step: spool.entries(step.spec.id)  # noqa: E731
    else:
        audience = prepare_audience(
            engine,
            loaded,
            occurrence_at,
            per_occurrence=per_occurrence,
            takeover_after=takeover_after,
        )
        stream = lambda _step: audience_entries(audience(None))  # noqa: E731
    for index, step in enumerate(steps):
        skipped = _fan_out_step(
            engine,
            outbox,
            occurrences,
            loaded,
            stream,
            _Step(index, step, planner),
            occurrence_at,
            batch_size,
            replace_pending,
            progress,
            result,
        )
        if result.steps_done == 0:
            result.skipped_rows = skipped
        result.steps_done += 1
    return result


def prepare_audience(
    engine: Engine,
    loaded: LoadedCampaign,
    occurrence_at: datetime,
    *,
    per_occurrence: bool = False,
    takeover_after: float | None = None,
) -> Audience:
    """The occurrence's audience as a re-iterable source (snapshotted first if it is read per
    occurrence: a URL one, or a scheduled campaign's CSV)."""
    if not snapshotted(loaded, per_occurrence=per_occurrence):
        return lambda _conn: iter_audience(loaded)
    snapshot = ensure_snapshot(engine, loaded, occurrence_at, takeover_after=takeover_after)
    try:
        refuse_strict_rejects(loaded, snapshot)
    except AudienceError:
        discard_unused_snapshot(engine, loaded.spec.name, occurrence_at)
        raise
    return lambda conn: iter_snapshot(engine, snapshot, conn=conn)


#: One entry of a step's stream: the audience position and the job, or the recipient it is
#: still to be composed for (None: an unusable row).
Item = tuple[int, NewJob | Recipient | None]


def audience_entries(items: Iterable[Recipient | RowProblem]) -> Iterator[Item]:
    """The audience as a stream of entries; each job is composed only if it is fanned out."""
    for position, item in enumerate(items, start=1):
        yield position, None if isinstance(item, RowProblem) else item


@dataclass(frozen=True)
class _Step:
    index: int
    compiled: CompiledStep
    planner: Planner


def _fan_out_step(
    engine: Engine,
    outbox: OutboxStore,
    occurrences: OccurrenceStore,
    loaded: LoadedCampaign,
    stream: Callable[[CompiledStep], Iterator[Item]],
    planned: _Step,
    occurrence_at: datetime,
    batch_size: int,
    replace_pending: bool,
    progress: Callable[[int], None] | None,
    result: FanoutResult,
) -> int:
    """Fan out one step; returns how many audience rows were skipped as unusable."""
    step = planned.compiled
    name = loaded.spec.name
    campaigns = CampaignStore(engine.dialect.name)
    with engine.begin() as conn:
        occurrence = occurrences.open(conn, name, step.spec.id, occurrence_at)
    # A finished fan-out is re-walked only for a new version, whose pending jobs change.
    if occurrence.fanout_state == "done" and not replace_pending:
        count = skipped = 0
        for _, entry in stream(step):
            if entry is None:
                skipped += 1
            else:
                count += 1
        result.existing_jobs += count
        if progress is not None:
            progress(count)
        return skipped
    start = 0 if replace_pending else occurrence.cursor

    def check_version(conn: Connection) -> None:
        # A new version stored meanwhile owns this campaign's jobs now: adding ours would
        # bring back content it removed (see scheduler.new_version).
        stored = campaigns.spec_hash(conn, name, lock=True)
        if stored is not None and stored != loaded.spec_hash:
            raise CampaignConflict(
                f"campaign {name!r} changed while launching",
                hint="launch again: the stored definition decides",
            )

    def enqueue(conn: Connection, jobs: Sequence[NewJob], position: int) -> int:
        check_version(conn)
        created = outbox.enqueue(conn, jobs, replace_pending=replace_pending)
        occurrences.advance(conn, occurrence.id, position, created)
        return created

    def insert_staged(conn: Connection, jobs: Sequence[NewJob], position: int) -> int:
        check_version(conn)
        created = bulk_enqueue.insert_staged(conn, jobs)
        occurrences.advance(conn, occurrence.id, position, created)
        return created

    def committed(count: int, created: int) -> None:
        result.new_jobs += created
        result.existing_jobs += count - created
        if progress is not None:
            progress(count)

    writer: BatchWriter = (
        PipelinedWriter(engine, insert_staged, committed)
        if pipelined(engine, replace_pending=replace_pending)
        else SerialWriter(engine, enqueue, committed)
    )
    position = skipped = 0
    batch: list[NewJob] = []
    try:
        for position, entry in stream(step):
            if entry is None:
                skipped += 1
                continue
            if position <= start:
                result.existing_jobs += 1
                continue
            if isinstance(entry, Recipient):
                recipient = entry
                try:
                    entry = compose_broadcast(
                        loaded, planned.planner, planned.index, step, recipient, occurrence_at
                    )
                except TemplateError as exc:
                    result.unrendered += 1
                    if len(result.problems) < MAX_PROBLEMS:
                        where = f"{recipient.where} ({recipient.email})"
                        result.problems.append(f"{where}: step {step.spec.id!r}: {exc}")
                    continue
            batch.append(entry)
            if len(batch) >= batch_size:
                writer.write(batch, position)
                batch = []
        if batch:
            writer.write(batch, position)
        writer.finish()
    finally:
        writer.close()
    with engine.begin() as conn:
        occurrences.close(conn, occurrence.id)
    return skipped
