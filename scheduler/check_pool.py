"""A launch's check of a large audience file, composed by several processes at once.

Composing every message is most of a launch's CPU (bench/profiles/fanout.md), and one process
uses one core. Here the parent forks before it reads the audience; every process reads the
whole file, checking and composing only its own share of the rows (parsing a row is cheap;
checking its address and composing it is not): blocks of
``block`` consecutive positions dealt round-robin, block 0 to the parent, so the first
recipient is the parent's. A child writes its jobs into a spool part the parent made before
forking (an anonymous file it inherits), and sends its progress and a summary through a pipe;
the parent merges the parts by position (scheduler.spool.JobSpool.adopt). Fan-out then reads
one stream in audience order, as after a one-process check.

Only a clean result is taken. If any process finds a problem, a child fails or is killed, or
the processes did not see the same number of rows, everything composed is discarded and the
caller checks again in one process: a failed check reports exactly what it always did (every
problem, in order, with its line), and a launch never fans out from a partial spool. (The rows
the first attempt counted stay counted on the progress bar: it has no total while checking.)

A child does not outlive the launch: a launch that unwinds (an error, SIGTERM, Ctrl-C) kills
its children; one killed outright leaves them a closed pipe, which their next progress line
(one per block) meets.

Fork safety: a child only reads the file, composes, writes to its own descriptors and leaves
through ``os._exit``. It never touches the database connections it inherits, the terminal, or
a lock another thread of the parent may hold (a progress bar's refresh thread), and never runs
the parent's exit handlers or finalisers. Its stop signals are reset to their defaults first
(``_default_signals``). The scheduler forks from the thread its pass runs in
(scheduler.occurrence_pool), where no other thread composes.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final, Generic, NoReturn, TypeVar

from campaigns.audience import Recipient, RowProblem
from campaigns.spec import CsvAudience, LoadedCampaign
from scheduler.check_report import CheckReport
from scheduler.spool import JobSpool
from templates.files import FileRefused

Row = Recipient | RowProblem
#: What the processes share out: an audience's rows, or a drip pass's ready enrollments
#: (scheduler.drip_pool).
Item = TypeVar("Item")
#: The items, giving only those at the positions a predicate wants (None for others).
ShareReader = Callable[[Callable[[int], bool]], Iterator[Item | None]]
#: One item's check (scheduler.check._RowCheck.check): True when it composed for a recipient.
CheckRow = Callable[[JobSpool | None, CheckReport, int, Item], bool]


@dataclass(frozen=True)
class Shares(Generic[Item]):
    """What the processes share out (``read``) and how one item is checked and composed
    (``check``). Named with its item type, ``Shares[Row](…)``: the type a function's
    arguments could not tell apart from ``Row | None``."""

    read: ShareReader[Item]
    check: CheckRow[Item]


Progress = Callable[[int], None]

#: More processes read the file more times over for less each: past four, reading dominates.
MAX_PROCESSES: Final = 4
#: Below this the file is checked in one process: forking and reading it twice is not worth it.
MIN_BYTES: Final = 256 * 1024
#: The same for a scheduled occurrence's snapshot, in rows (scheduler.occurrence_pool): about
#: what a 256 KiB file holds.
MIN_ROWS: Final = 5000


@dataclass(frozen=True)
class CheckPool:
    processes: int
    block: int = 1024  # consecutive audience positions in one share
    min_bytes: int = MIN_BYTES
    min_rows: int = MIN_ROWS

    def takes(self, loaded: LoadedCampaign) -> bool:
        """Whether this campaign's audience is a file big enough to share out."""
        audience = loaded.spec.audience
        if self.processes < 2 or not isinstance(audience, CsvAudience):
            return False
        try:
            return loaded.resolve(audience.csv).stat().st_size >= self.min_bytes
        except (FileRefused, OSError):
            return False  # the one-process check reports it, with its file and line

    def share(self, position: int) -> int:
        """Which process composes audience position ``position`` (1-based); 0 is the parent."""
        return ((position - 1) // self.block) % self.processes


def pool_of(processes: int | None = None) -> CheckPool | None:
    """A pool of ``processes`` (None: one per usable core, at most MAX_PROCESSES); None when
    that is one process, or without fork."""
    if not hasattr(os, "fork"):
        return None
    if processes is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
        processes = min(cores or os.cpu_count() or 1, MAX_PROCESSES)
    return CheckPool(processes) if processes > 1 else None


def check_in_processes(
    pool: CheckPool,
    spool: JobSpool,
    shares: Shares[Item],
    progress: Progress | None,
    *,
    beside: Callable[[], None] | None = None,
) -> CheckReport | None:
    """The check's report with every job in ``spool``; None when the check must be run again in
    one process (a problem somewhere, a child that failed; ``spool`` is then empty again).

    ``beside``: the parent's own work meanwhile, instead of a share: every share goes to a
    child (scheduler.occurrence_pool writes the occurrence's snapshot while they compose). What
    it raises discards the children's work and propagates."""
    children: list[_Child[Item]] = []
    try:
        try:
            for index in range(0 if beside is not None else 1, pool.processes):
                children.append(_Child.start(pool, index, spool, shares))
        except OSError:  # no fork today (process limit, memory): one process will do
            _discard(children, spool)
            return None
        if beside is None:
            report, seen = _own_share(pool, spool, shares, progress, children)
        else:
            # The children's progress lines wait in their pipes meanwhile (a line per block
            # composed: 64 KiB hold those of millions of rows).
            beside()
            report, seen = CheckReport(), -1
        summaries = [child.finish(progress) for child in children]
    except BaseException:
        _discard(children, spool)
        raise
    if beside is not None and summaries[0] is not None:
        seen = summaries[0]["rows"]  # every share a child's: all must have read the same rows
    if not report.ok or any(_unusable(summary, seen) for summary in summaries):
        _discard(children, spool)
        return None
    for child, summary in zip(children, summaries, strict=True):
        assert summary is not None  # _unusable
        spool.adopt(child.part, summary["spool"])
        report.recipients += summary["recipients"]
        report.messages += summary["messages"]
    return report


def _own_share(
    pool: CheckPool,
    spool: JobSpool,
    shares: Shares[Item],
    progress: Progress | None,
    children: list[_Child[Item]],
) -> tuple[CheckReport, int]:
    report = CheckReport()
    seen = 0
    stream = shares.read(lambda position: pool.share(position) == 0)
    try:
        for position, item in enumerate(stream, start=1):
            seen = position
            if item is not None:
                if shares.check(spool, report, position, item) and progress is not None:
                    progress(1)
                if not report.ok:
                    break
            elif position % pool.block == 0:
                for child in children:
                    child.poll(progress)
                if any(child.failed for child in children):
                    break
    finally:
        _close(stream)
    return report, seen


def _unusable(summary: dict[str, Any] | None, seen: int) -> bool:
    return summary is None or not summary["ok"] or summary["rows"] != seen


def _discard(children: list[_Child[Item]], spool: JobSpool) -> None:
    for child in children:
        child.kill()
    spool.reset()


def _close(stream: Iterator[Item | None]) -> None:
    close = getattr(stream, "close", None)
    if close is not None:
        close()  # a generator's: closes the file it reads


class _Child(Generic[Item]):
    """A forked process composing one share, seen from the parent."""

    def __init__(self, pid: int, pipe: int, part: JobSpool) -> None:
        self.pid = pid
        self.part = part
        self._pipe: int | None = pipe
        self._buffer = b""
        self.summary: dict[str, Any] | None = None
        self.failed = False  # it reported a problem: the whole check is run again

    @classmethod
    def start(
        cls,
        pool: CheckPool,
        index: int,
        spool: JobSpool,
        shares: Shares[Item],
    ) -> _Child[Item]:
        part = JobSpool(spool.steps)
        read_end, write_end = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            os.close(read_end)
            os.close(write_end)
            part.close()
            raise
        if pid == 0:
            os.close(read_end)
            _compose_share(pool, index, part, shares, write_end)
        os.close(write_end)
        os.set_blocking(read_end, False)
        return cls(pid, read_end, part)

    def poll(self, progress: Progress | None) -> None:
        """Take in what the child has said so far, without waiting."""
        while self._pipe is not None:
            try:
                chunk = os.read(self._pipe, 65536)
            except BlockingIOError:
                return
            if not chunk:
                self._close_pipe()
                return
            self._take(chunk, progress)

    def finish(self, progress: Progress | None) -> dict[str, Any] | None:
        """Wait for the child's end: its summary, or None if it ended without one."""
        if self._pipe is not None:
            os.set_blocking(self._pipe, True)
        while self._pipe is not None:
            chunk = os.read(self._pipe, 65536)
            if not chunk:
                self._close_pipe()
            else:
                self._take(chunk, progress)
        try:
            _, status = os.waitpid(self.pid, 0)
        except ChildProcessError:  # reaped by someone else (SIGCHLD ignored): no verdict
            return None
        finally:
            self.pid = 0
        return self.summary if os.waitstatus_to_exitcode(status) == 0 else None

    def kill(self) -> None:
        if self.pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, 0)
            self.pid = 0
        self._close_pipe()
        self.part.close()

    def _take(self, chunk: bytes, progress: Progress | None) -> None:
        *lines, self._buffer = (self._buffer + chunk).split(b"\n")
        for line in lines:
            if line.startswith(b"+"):
                if progress is not None:
                    progress(int(line[1:]))
            elif line.startswith(b"="):
                self.summary = json.loads(line[1:])
                self.failed = not self.summary["ok"]

    def _close_pipe(self) -> None:
        if self._pipe is not None:
            os.close(self._pipe)
            self._pipe = None


def _compose_share(
    pool: CheckPool,
    index: int,
    part: JobSpool,
    shares: Shares[Item],
    pipe: int,
) -> NoReturn:
    """The child: compose share ``index`` into ``part``, report through ``pipe``, and leave
    without returning into the parent's code (no exit handlers, no finalisers)."""
    status = 1
    try:
        _default_signals()
        report = CheckReport()
        seen = composed = 0
        for position, item in enumerate(shares.read(lambda at: pool.share(at) == index), start=1):
            seen = position
            if item is None:
                continue
            if shares.check(part, report, position, item):
                composed += 1
            if not report.ok:
                break
            if position % pool.block == 0 and composed:
                _send(pipe, b"+%d\n" % composed)
                composed = 0
        summary = {
            "ok": report.ok,
            "rows": seen,
            "recipients": report.recipients,
            "messages": report.messages,
            "spool": part.written() if report.ok else None,
        }
        if composed:
            _send(pipe, b"+%d\n" % composed)
        _send(pipe, b"=" + json.dumps(summary).encode() + b"\n")
        status = 0
    except BaseException:  # noqa: S110 - the parent sees no summary and checks in one process
        pass
    finally:
        os._exit(status)


def _default_signals() -> None:
    """The child's stop signals do what they do to any process, not what the parent's handlers
    do: a scheduler's asyncio loop would hear the child's SIGTERM through the wake-up descriptor
    they share, as a second stop (a forced exit). Fork makes the forking thread the child's
    main thread, so the child may change them. A child stopped this way sends no summary: the
    parent composes in one process, if it is not stopping itself."""
    signal.set_wakeup_fd(-1)
    for name in ("SIGINT", "SIGTERM", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_DFL)


def _send(pipe: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(pipe, view) :]
