"""A scheduled occurrence's messages composed by several processes at once.

An occurrence of a recurring campaign fans out from its snapshot (scheduler.snapshot), and
fan-out composed every message in the scheduler's own process: one core, two thirds of a large
occurrence's time (bench/profiles/fanout.md, session 40). A launch's check already shares its
composing out (scheduler.check_pool); an occurrence now does the same. Its snapshot's rows are
copied once to an anonymous file, as they are stored (``SnapshotRows``); every process reads
that file and composes its own share into a spool part; fan-out then streams the merged spool
as it streams a launch's (scheduler.fanout, ``composed``).

The same messages either way: ``compose_broadcast`` at the occurrence's time, for the same
snapshot rows, with steps compiled the same way (tests/integration/test_occurrence_pool.py).
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

from campaigns.audience import Recipient, RowProblem
from campaigns.audience_formats import Unit
from campaigns.spec import LoadedCampaign
from scheduler.check_pool import CheckPool, CheckRow, check_in_processes
from scheduler.check_report import CheckReport, Problem
from scheduler.compose import CompiledStep, CompileFailures, compile_steps, compose_broadcast
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
    or imperfect one, or a process that failed). ``page``: snapshot rows a read and a block."""
    if not snapshotted(loaded, per_occurrence=True):
        return None
    rows = SnapshotRows()
    try:
        # A snapshot read now is copied as it is written; one found complete is copied from
        # the database.
        snapshot = ensure_snapshot(
            engine,
            loaded,
            occurrence_at,
            batch=page,
            takeover_after=takeover_after,
            written=rows.add,
        )
        if snapshot.rows < pool.min_rows or snapshot.rejects:
            return None  # rejected rows: fan-out refuses or skips them, and says so
        if rows.count != snapshot.rows:
            rows.close()
            rows = SnapshotRows.of(engine, snapshot, page=page)
        rows.seal(snapshot.unit)
        return _composed(loaded, occurrence_at, pool, links, rows)
    finally:
        rows.close()


def _composed(
    loaded: LoadedCampaign,
    occurrence_at: datetime,
    pool: CheckPool,
    links: UnsubscribeLinks | None,
    rows: SnapshotRows,
) -> JobSpool | None:
    try:
        steps = compile_steps(loaded, links)
    except CompileFailures:
        return None  # a template file changed meanwhile: fan-out meets it as it always did
    spool = JobSpool(step.id for step in loaded.spec.steps)
    try:
        report = check_in_processes(
            pool, spool, rows.share, _composer(loaded, steps, occurrence_at), None
        )
    except BaseException:
        spool.close()
        raise
    if report is None:
        spool.close()
        return None
    spool.complete = True
    return spool


def _composer(
    loaded: LoadedCampaign, steps: list[CompiledStep], occurrence_at: datetime
) -> CheckRow:
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
