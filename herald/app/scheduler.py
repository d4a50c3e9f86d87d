"""Use case ``run_scheduler``: fire due triggers into the outbox, waking when something falls due.

The database is the record of what fired: one scheduler pass (``scheduler.passes.run_pass``,
through herald.app.scheduler_pass) inserts each fire, occurrence and drip step with ``ON
CONFLICT DO NOTHING``, so any number of schedulers on one database need no leader
(docs/design.md §7). APScheduler 3 is only this
process's alarm clock (research scheduling.md §3): a memory job store, two jobs —
``herald:tick`` (an interval, to notice what other processes changed) and ``herald:wake`` (a
date, the next due time the database knows of) — whose bodies only set an ``asyncio.Event``. The
pass itself runs in a thread from the main loop, so a shutdown of the timer can never cancel
half a batch (each batch is its own transaction anyway).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Protocol

from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from herald.app.common import Clock, utc_now
from herald.app.reload import install_sighup, reload_request

if TYPE_CHECKING:
    from apscheduler.schedulers.asyncio import AsyncIOScheduler

    from scheduler.unsubscribe_links import UnsubscribeLinks

TICK_JOB = "herald:tick"
WAKE_JOB = "herald:wake"
STARTED = "scheduler running"
FORCED_EXIT = 130  # the second SIGTERM/SIGINT: leave at once, as `herald worker` does


class PassOutcome(Protocol):
    """What the loop needs of a pass's report: whether it did anything, and one line saying what."""

    @property
    def did_something(self) -> bool: ...

    def line(self) -> str:
        """What it did, or "nothing was due"."""
        ...

    def as_dict(self) -> dict[str, object]: ...


class PassFunction(Protocol):
    def __call__(self, engine: Engine, *, now: datetime, actor: str) -> PassOutcome: ...


class SchedulerObserver(Protocol):
    """Told of every pass (herald.metrics.SchedulerMetrics counts them); from the pass's
    thread, so each call must be quick and thread-safe."""

    def on_pass(self, outcome: PassOutcome) -> None: ...

    def on_pass_failed(self) -> None: ...


WakeFunction = Callable[[Engine, datetime], datetime | None]
Say = Callable[[str], None]


def _quiet(_line: str) -> None:
    return None


def default_actor() -> str:
    """Who fired it, for the journal: ``scheduler:<host>:<pid>``."""
    return f"scheduler:{socket.gethostname()}:{os.getpid()}"


@dataclass(frozen=True)
class SchedulerOptions:
    """What ``herald scheduler`` (and ``herald run``) let the operator choose."""

    tick: float = 30.0  # seconds between passes when nothing is due sooner
    # A wake is never armed sooner than this after a pass, and the gap doubles (up to ``tick``)
    # while passes woken for overdue work do nothing: work the database keeps reporting as due
    # but a pass cannot do yet (an audience another scheduler is reading, a fire retried after
    # an error) costs a few passes, not a spin.
    min_gap: float = 1.0
    backoff_first: float = 1.0  # after a database error; doubles up to ``tick``

    @property
    def jitter(self) -> float:
        # Schedulers started together should not all tick in the same instant.
        return min(5.0, self.tick / 10)


@dataclass
class SchedulerTotals:
    passes: int = 0
    busy_passes: int = 0  # passes that did something
    errors: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


class WakeTimer:
    """APScheduler 3 as a per-process alarm clock: two jobs whose bodies only set ``event``.

    ``start`` needs a running event loop (AsyncIOScheduler takes the running one).
    """

    def __init__(self, tick: float, jitter: float = 0.0) -> None:
        self.tick = tick
        self.jitter = jitter
        self.event = asyncio.Event()
        self.scheduler: AsyncIOScheduler | None = None

    def start(self) -> None:
        from apscheduler.schedulers.asyncio import AsyncIOScheduler
        from apscheduler.triggers.interval import IntervalTrigger

        self.scheduler = AsyncIOScheduler(
            timezone=UTC,
            # No grace limit: a wake that comes late (a busy loop, a suspended machine) still
            # rings; APScheduler's default of 1 s would drop it silently.
            job_defaults={"misfire_grace_time": None, "coalesce": True, "max_instances": 1},
        )
        self.scheduler.add_job(
            self._ring,
            IntervalTrigger(seconds=self.tick, jitter=self.jitter or None, timezone=UTC),
            id=TICK_JOB,
            replace_existing=True,
        )
        self.scheduler.start()

    def arm(self, at: datetime | None) -> None:
        """Ring at ``at`` (aware); None: nothing is due, only the tick remains."""
        scheduler = self._running()
        if at is None:
            with contextlib.suppress(LookupError):  # JobLookupError: not armed
                scheduler.remove_job(WAKE_JOB)
            return
        scheduler.add_job(
            self._ring, "date", run_date=at.astimezone(UTC), id=WAKE_JOB, replace_existing=True
        )

    def armed_at(self) -> datetime | None:
        job = self._running().get_job(WAKE_JOB)
        return None if job is None else job.next_run_time

    def shutdown(self) -> None:
        if self.scheduler is not None and self.scheduler.running:
            self.scheduler.shutdown(wait=False)

    def _running(self) -> AsyncIOScheduler:
        assert self.scheduler is not None, "WakeTimer.start() first"
        return self.scheduler

    async def _ring(self) -> None:
        # A coroutine, so APScheduler's asyncio executor runs it on the loop, not in a thread.
        self.event.set()


class SchedulerService:
    """The ``herald scheduler`` loop: a pass, arm the wake, sleep until a ring, again.

    ``run_pass``/``next_wake`` default to the scheduler package's; tests pass stand-ins.
    ``clock`` is the one source of ``now`` for every pass. ``links``: the unsubscribe links
    of the marketing messages it composes (herald.app.unsubscribe). ``observer``: told of
    every pass (herald.metrics).
    """

    def __init__(
        self,
        engine: Engine,
        *,
        options: SchedulerOptions | None = None,
        clock: Clock = utc_now,
        actor: str | None = None,
        run_pass: PassFunction | None = None,
        next_wake: WakeFunction | None = None,
        say: Say = _quiet,
        links: UnsubscribeLinks | None = None,
        observer: SchedulerObserver | None = None,
    ) -> None:
        self.engine = engine
        self.observer = observer
        self.options = options or SchedulerOptions()
        self.clock = clock
        self.actor = actor or default_actor()
        self.run_pass, self.next_wake = _pass_functions(run_pass, next_wake, links)
        self.say = say
        self.timer = WakeTimer(self.options.tick, self.options.jitter)
        self.totals = SchedulerTotals()
        self._stop = asyncio.Event()
        self._failures = 0  # database errors in a row
        self._idle_overdue = 0  # passes in a row woken for overdue work that did nothing

    # ------------------------------------------------------------ control

    def stop(self) -> None:
        """Graceful: the pass under way finishes (each batch commits on its own), then exit."""
        self._stop.set()
        self.timer.event.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    async def run(self) -> SchedulerTotals:
        """Pass after pass until ``stop``; database errors are reported and retried."""
        self.timer.start()
        # Said once the signal handlers (if any) are in place: from here a SIGTERM is graceful.
        self.say(f"{STARTED}: a pass at least every {self.options.tick:g}s")
        try:
            while not self.stopping:
                self.timer.event.clear()  # a ring during the pass means: pass again at once
                ok, wake = await self._pass()
                if self.stopping:
                    break
                if not ok:
                    await self._back_off()
                    continue
                self.timer.arm(self._clamped(wake))
                await self.timer.event.wait()
        finally:
            self.timer.shutdown()
        return self.totals

    async def once(self) -> PassOutcome:
        """One pass (``herald scheduler --once``); a database error propagates."""
        report, _ = await asyncio.to_thread(self._pass_in_thread)
        return report

    # ------------------------------------------------------------ one pass

    async def _pass(self) -> tuple[bool, datetime | None]:
        """(False, None) after a database error (reported), else (True, the next wake)."""
        try:
            report, wake = await asyncio.to_thread(self._pass_in_thread)
        except SQLAlchemyError as exc:
            self.totals.errors += 1
            self._failures += 1
            if self.observer is not None:
                self.observer.on_pass_failed()
            self.say(f"database error: {_first_line(exc)}; retrying in {self._backoff():g}s")
            return False, None
        self._failures = 0
        overdue = wake is not None and wake <= self.clock()
        self._idle_overdue = self._idle_overdue + 1 if overdue and not report.did_something else 0
        return True, wake

    def _pass_in_thread(self) -> tuple[PassOutcome, datetime | None]:
        now = self.clock()
        report = self.run_pass(self.engine, now=now, actor=self.actor)
        self.totals.passes += 1
        if self.observer is not None:
            self.observer.on_pass(report)
        if report.did_something:
            self.totals.busy_passes += 1
            self.say(f"{now:%Y-%m-%d %H:%M:%S}Z {report.line()}")
        return report, self.next_wake(self.engine, self.clock())

    def _clamped(self, wake: datetime | None) -> datetime | None:
        if wake is None:
            return None
        gap = min(self.options.tick, self.options.min_gap * 2.0 ** max(0, self._idle_overdue - 1))
        return max(wake, self.clock() + timedelta(seconds=gap))

    def _backoff(self) -> float:
        first = self.options.backoff_first
        return min(self.options.tick, first * 2.0 ** max(0, self._failures - 1))

    async def _back_off(self) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), timeout=self._backoff())


def _first_line(exc: SQLAlchemyError) -> str:
    detail = str(getattr(exc, "orig", None) or exc).strip()
    return detail.splitlines()[0] if detail else type(exc).__name__


def _pass_functions(
    run_pass: PassFunction | None,
    next_wake: WakeFunction | None,
    links: UnsubscribeLinks | None = None,
) -> tuple[PassFunction, WakeFunction]:
    if run_pass is None:
        from herald.app.scheduler_pass import ScheduledPass

        run_pass = ScheduledPass(links=links)
    if next_wake is None:
        from scheduler.passes import next_wake as wake_of_database

        next_wake = wake_of_database
    return run_pass, next_wake


def stop_on_signals(on_first: Callable[[], None]) -> None:
    """SIGTERM/SIGINT call ``on_first`` once; a second one exits at once (leases keep it safe).
    SIGHUP calls ``on_first`` too and asks the CLI to re-execute the command once stopped.

    Call from inside the running loop; the handlers go with the loop.
    """
    loop = asyncio.get_running_loop()
    seen = 0

    def on_signal() -> None:
        nonlocal seen
        seen += 1
        if seen == 1:
            if reload_request.cancel():
                return  # stopping already, for a SIGHUP: now it stops for good
            on_first()
        else:
            os._exit(FORCED_EXIT)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    # SIGHUP: the same graceful stop, then the CLI re-executes the command (herald.app.reload).
    install_sighup(on_first, stopping=lambda: seen > 0)


def run_scheduler(
    service: SchedulerService,
    *,
    handle_signals: bool = False,
    on_stopping: Callable[[], None] | None = None,
) -> SchedulerTotals:
    """Run ``service`` until stopped; with ``handle_signals`` (the CLI) SIGTERM/SIGINT stop it."""

    async def main() -> SchedulerTotals:
        if handle_signals:

            def first() -> None:
                if on_stopping is not None:
                    on_stopping()
                service.stop()

            stop_on_signals(first)
        return await service.run()

    return asyncio.run(main())


def run_scheduler_once(service: SchedulerService) -> PassOutcome:
    return asyncio.run(service.once())


__all__ = [
    "PassFunction",
    "PassOutcome",
    "SchedulerObserver",
    "SchedulerOptions",
    "SchedulerService",
    "SchedulerTotals",
    "WakeTimer",
    "default_actor",
    "run_scheduler",
    "run_scheduler_once",
    "stop_on_signals",
]
