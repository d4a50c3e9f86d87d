"""A scheduled occurrence's messages composed by several processes at once.

An occurrence of a recurring campaign fans out from its snapshot (scheduler.snapshot), and
fan-out composed every message in the scheduler's own process: one core, two thirds of a large
occurrence's time (bench/profiles/fanout.md, session 40). A launch's check already shares its
composing out (scheduler.check_pool); an occurrence now does the same, in one of two ways:

- its list is a CSV file big enough for the pool (``CheckPool.takes``), read now: one child
  per core composes its share from the file (as a launch's check does) while this process
  writes the snapshot from the same file. Their work is kept only if they read the same list:
  the snapshot was written now, the file's sha256 is the same after as before, and every row
  was a recipient;
- otherwise (a URL list, a smaller file, a snapshot a crashed pass left complete, or the above
  not kept): the snapshot's rows are copied to an anonymous file (as they are written, when
  they are written now), every process reads that file and composes its own share.

Fan-out then streams the merged spool as it streams a launch's (scheduler.fanout,
``composed``). The same messages either way: ``compose_broadcast`` at the occurrence's time,
for the same rows, with steps compiled the same way (tests/integration/test_occurrence_pool.py).
Only a clean result is taken: if a row is unusable, a message cannot be rendered or a process
fails, the spool is dropped and fan-out composes in its own process as before, skipping and
noting what it must. A small occurrence (``CheckPool.min_rows``) is not worth the forks.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import IO, Any

from sqlalchemy.engine import Engine

from campaigns.audience import Recipient, RowProblem, iter_audience_share
from campaigns.audience_formats import Unit
from campaigns.spec import LoadedCampaign
from scheduler.check_pool import (
    CheckPool,
    CheckRow,
    Row,
    ShareReader,
    Shares,
    check_in_processes,
)
from scheduler.check_report import CheckReport, Problem
from scheduler.compose import CompiledStep, CompileFailures, compile_steps, compose_broadcast
from scheduler.enrollment import csv_digest
from scheduler.planning import Planner
from scheduler.snapshot import SNAPSHOT_BATCH, Snapshot, ensure_snapshot, snapshotted
from scheduler.spool import JobSpool, read_blocks, write_block
from scheduler.store import SnapshotStore
from scheduler.unsubscribe_links import UnsubscribeLinks
from templates.errors import TemplateError

#: A snapshot row's stored columns, in the order of ``SnapshotStore.page`` after the position.
COLUMNS = ("line", "email", "name", "variables", "problem")


def composed_occurrence(
    engine: Engine,
    loaded: LoadedCampaign,
    occurrence_at: datetime,
    *,
    pool: CheckPool,
    links: UnsubscribeLinks | None,
    takeover_after: float | None,
    page: int = SNAPSHOT_BATCH,
) -> JobSpool | None:
    """Every step's jobs of this occurrence, composed by ``pool``'s processes, in a complete
    spool the caller closes; None when fan-out should compose them itself (no snapshot, a small
    or imperfect one, or a process that failed). ``page``: snapshot rows a batch and a read."""
    if not snapshotted(loaded, per_occurrence=True):
        return None
    try:
        composer = _composer(loaded, compile_steps(loaded, links), occurrence_at)
    except CompileFailures:
        return None  # a template file changed meanwhile: fan-out meets it as it always did
    rows = SnapshotRows()

    def snapshot_now() -> Snapshot:
        # A snapshot read now is copied as it is written (``rows``); one found complete is not.
        return ensure_snapshot(
            engine,
            loaded,
            occurrence_at,
            batch=page,
            takeover_after=takeover_after,
            written=rows.add,
        )

    try:
        if pool.takes(loaded):
            spool, snapshot = _beside_snapshot(pool, loaded, composer, snapshot_now, rows)
            if spool is not None:
                return spool
        else:
            snapshot = snapshot_now()
        if snapshot.rows < pool.min_rows or snapshot.rejects:
            return None  # rejected rows: fan-out refuses or skips them, and says so
        if rows.count != snapshot.rows:
            rows.close()
            rows = SnapshotRows.of(engine, snapshot, page=page)
        rows.seal(snapshot.unit)
        composed = _in_processes(pool, loaded, rows.share, composer)
        return None if composed is None else composed[0]
    finally:
        rows.close()


def _beside_snapshot(
    pool: CheckPool,
    loaded: LoadedCampaign,
    composer: CheckRow[Row],
    snapshot_now: Callable[[], Snapshot],
    rows: SnapshotRows,
) -> tuple[JobSpool | None, Snapshot]:
    """The occurrence's jobs composed from its CSV file while this process writes the snapshot
    from the same file, and the snapshot. The spool is kept only if they read the same list:
    the snapshot was written now, the file's sha256 is the same after as before, and every
    row was a recipient. Else None (the snapshot is composed from its copy, or by fan-out)."""
    digest = csv_digest(loaded)
    taken: list[Snapshot] = []
    composed = _in_processes(
        pool,
        loaded,
        lambda wanted: iter_audience_share(loaded, wanted),
        composer,
        beside=lambda: taken.append(snapshot_now()),
    )
    # No snapshot yet if the processes could not be started (fork refused): written now.
    snapshot = taken[0] if taken else snapshot_now()
    same_list = (
        rows.count == snapshot.rows
        and not snapshot.rejects
        and digest is not None
        and csv_digest(loaded) == digest
    )
    if composed is None:
        return None, snapshot
    spool, report = composed
    # (Every row a recipient of one process: belt and braces beside the file's digest.)
    if not (same_list and report.recipients == snapshot.rows):
        spool.close()
        return None, snapshot
    return spool, snapshot


def _in_processes(
    pool: CheckPool,
    loaded: LoadedCampaign,
    rows: ShareReader[Row],
    composer: CheckRow[Row],
    beside: Callable[[], None] | None = None,
) -> tuple[JobSpool, CheckReport] | None:
    """``check_in_processes`` into a new spool: the spool, complete, and the report."""
    spool = JobSpool(step.id for step in loaded.spec.steps)
    try:
        report = check_in_processes(pool, spool, Shares[Row](rows, composer), None, beside=beside)
    except BaseException:
        spool.close()
        raise
    if report is None:
        spool.close()
        return None
    spool.complete = True
    return spool, report


def _composer(
    loaded: LoadedCampaign, steps: list[CompiledStep], occurrence_at: datetime
) -> CheckRow[Row]:
    """One row's jobs into a spool, as fan-out would compose them; any trouble is a problem
    in the report, which sends the whole occurrence back to fan-out's own composing."""
    planner = Planner(loaded.spec)

    def compose(spool: JobSpool | None, report: CheckReport, position: int, item: Any) -> bool:
        if not isinstance(item, Recipient):
            report.add(Problem(f"position {position}", None, "an unusable row"))
            return False
        report.recipients += 1
        jobs = []
        for index, step in enumerate(steps):
            try:
                jobs.append(compose_broadcast(loaded, planner, index, step, item, occurrence_at))
            except TemplateError as exc:
                report.add(Problem(f"position {position}", step.spec.id, str(exc)))
                return False
        assert spool is not None  # check_in_processes always passes its spool or a part
        for job in jobs:
            spool.add_job(position, job)
        report.messages += len(jobs)
        return True

    return compose


class SnapshotRows:
    """A snapshot's rows in an anonymous file (mode 0600, unlinked at once: personal data), so
    that forked processes can read them without the database; see scheduler.spool for the
    format. Each record is a row as stored: (line, email, name, variables as JSON, problem)."""

    def __init__(self) -> None:
        self.unit: Unit = "line"  # how the rows' places are counted (the snapshot's format)
        self.count = 0
        self._file: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close()

    def add(self, rows: list[dict[str, Any]]) -> None:
        """Rows as scheduler.snapshot writes them, in order."""
        write_block(self._file, [tuple(row[column] for column in COLUMNS) for row in rows])
        self.count += len(rows)

    def seal(self, unit: Unit) -> None:
        """Done writing: on disk before any process forks (a buffer the children inherited
        would be written once more by each of them)."""
        self.unit = unit
        self._file.flush()

    @classmethod
    def of(cls, engine: Engine, snapshot: Snapshot, *, page: int) -> SnapshotRows:
        """A copy of a snapshot already in the database."""
        rows = cls()
        try:
            store = SnapshotStore(engine.dialect.name)
            after = 0
            while True:
                with engine.connect() as conn:
                    read = store.page(
                        conn, snapshot.campaign, snapshot.occurrence_at, after=after, limit=page
                    )
                if read:
                    write_block(rows._file, [tuple(row)[1:] for row in read])
                    rows.count += len(read)
                    after = read[-1].position
                if len(read) < page:
                    return rows
        except BaseException:
            rows.close()
            raise

    def share(self, wanted: Callable[[int], bool]) -> Iterator[Recipient | RowProblem | None]:
        """Every row in order, as scheduler.snapshot.iter_snapshot makes it; a row at a position
        ``wanted`` refuses comes out as None, undecoded. Positions count from 1, as fan-out's."""
        position = 0
        for records in read_blocks(self._file):
            for line, email, name, variables, problem in records:
                position += 1
                if not wanted(position):
                    yield None
                elif problem is not None:
                    yield RowProblem(line, problem, self.unit)
                else:
                    yield Recipient(email, name, json.loads(variables), line, self.unit)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._file.close()
