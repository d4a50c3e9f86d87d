"""The ``herald scheduler`` loop (herald.app.scheduler): APScheduler as a wake-up timer only,
a pass in a thread per ring, graceful stop, database errors as one line (docs/design.md §7).

The pass and the wake query are stand-ins here (no database): what is tested is the loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from freezegun import freeze_time
from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError

from herald.app.common import utc_now
from herald.app.scheduler import (
    TICK_JOB,
    WAKE_JOB,
    SchedulerOptions,
    SchedulerService,
    WakeTimer,
)

T0 = datetime(2026, 3, 29, 0, 30, tzinfo=UTC)  # 30 min before Berlin springs forward
DEADLINE = 30.0  # seconds; only ever reached when the loop is broken


@dataclass
class Report:
    fired: int = 0

    @property
    def did_something(self) -> bool:
        return self.fired > 0

    def line(self) -> str:
        return f"fired {self.fired}"

    def as_dict(self) -> dict[str, object]:
        return {"fired": self.fired}


@dataclass
class FakeScheduler:
    """Records each pass's ``now``; ``wake`` decides ``next_wake``; ``fail`` raises first."""

    wake: Callable[[datetime], datetime | None] = lambda now: None
    fired: Callable[[int], int] = lambda n: 0
    fail: int = 0  # this many passes raise a database error first
    nows: list[datetime] = field(default_factory=list)
    actors: set[str] = field(default_factory=set)
    passed: threading.Condition = field(default_factory=threading.Condition)
    gate: threading.Event | None = None  # a pass waits for it (a long pass)
    entered: threading.Event = field(default_factory=threading.Event)
    finished: int = 0

    def run_pass(self, engine: Engine, *, now: datetime, actor: str) -> Report:
        if self.fail:
            self.fail -= 1
            raise OperationalError("SELECT 1", {}, Exception("server closed the connection"))
        self.entered.set()
        if self.gate is not None:
            self.gate.wait(DEADLINE)
        with self.passed:
            self.nows.append(now)
            self.actors.add(actor)
            self.finished += 1
            self.passed.notify_all()
        return Report(self.fired(len(self.nows)))

    def next_wake(self, engine: Engine, now: datetime) -> datetime | None:
        return self.wake(now)

    async def passes(self, count: int) -> None:
        """Until ``count`` passes have finished (the passes run in threads)."""

        def wait() -> None:
            with self.passed:
                assert self.passed.wait_for(lambda: self.finished >= count, DEADLINE)

        await asyncio.to_thread(wait)


@pytest.fixture
def engine() -> Iterator[Engine]:
    engine = sa.create_engine("sqlite://")  # never used by the stand-ins
    yield engine
    engine.dispose()


def service(
    engine: Engine, fake: FakeScheduler, lines: list[str] | None = None, **options: float
) -> SchedulerService:
    defaults = {"tick": 3600.0, "min_gap": 0.01, "backoff_first": 0.01}
    return SchedulerService(
        engine,
        options=SchedulerOptions(**{**defaults, **options}),
        actor="scheduler:test",
        run_pass=fake.run_pass,
        next_wake=fake.next_wake,
        say=(lines.append if lines is not None else lambda _line: None),
    )


async def run_until(svc: SchedulerService, fake: FakeScheduler, passes: int) -> None:
    """Run the loop until ``passes`` passes have finished, then stop it."""
    task = asyncio.create_task(svc.run())
    try:
        await fake.passes(passes)
    finally:
        svc.stop()
        await asyncio.wait_for(task, DEADLINE)


def test_the_wake_job_rings_when_the_frozen_clock_reaches_it() -> None:
    """Research scheduling.md §6: freezegun with real_asyncio, move_to, then wakeup()."""

    async def scenario() -> None:
        with freeze_time(T0, real_asyncio=True) as frozen:
            timer = WakeTimer(tick=3600)
            timer.start()
            try:
                assert timer.scheduler is not None
                due = T0 + timedelta(hours=1)
                timer.arm(due)
                timer.scheduler.wakeup()
                await _processed(timer)
                assert not timer.event.is_set()
                assert timer.armed_at() == due  # not yet due: still armed

                frozen.move_to(due + timedelta(seconds=1))
                # APScheduler's own timer waits real seconds: wakeup() makes it look now.
                timer.scheduler.wakeup()
                await asyncio.wait_for(timer.event.wait(), DEADLINE)
                assert timer.armed_at() is None  # a date job rings once
                assert timer.scheduler.get_job(TICK_JOB) is not None
            finally:
                timer.shutdown()

    asyncio.run(scenario())


async def _processed(timer: WakeTimer) -> None:
    """Wait until the scheduler has handled everything posted to the loop before this call
    (wakeup() is posted with call_soon_threadsafe; callbacks run in order)."""
    done = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().call_soon_threadsafe(done.set_result, None)
    await asyncio.wait_for(done, DEADLINE)
    await asyncio.sleep(0)  # and the job task it may have created


def test_the_timer_uses_a_memory_store_and_no_grace_limit() -> None:
    async def scenario() -> None:
        timer = WakeTimer(tick=30, jitter=3)
        timer.start()
        try:
            scheduler = timer.scheduler
            assert scheduler is not None
            timer.arm(utc_now() + timedelta(hours=1))
            jobs = {job.id: job for job in scheduler.get_jobs()}
            assert set(jobs) == {TICK_JOB, WAKE_JOB}
            for job in jobs.values():
                assert job.misfire_grace_time is None
                assert job.coalesce is True
                assert job.max_instances == 1
            assert type(scheduler._jobstores["default"]).__name__ == "MemoryJobStore"
            assert jobs[TICK_JOB].trigger.interval == timedelta(seconds=30)
            assert jobs[TICK_JOB].trigger.jitter == 3
            timer.arm(None)
            assert timer.armed_at() is None
            timer.arm(None)  # nothing armed: still fine
        finally:
            timer.shutdown()

    asyncio.run(scenario())


def test_a_late_wake_still_rings() -> None:
    """APScheduler's default grace of 1 s would silently drop a date already 5 s past."""

    async def scenario() -> None:
        timer = WakeTimer(tick=3600)
        timer.start()
        try:
            timer.arm(utc_now() - timedelta(seconds=5))
            await asyncio.wait_for(timer.event.wait(), DEADLINE)
        finally:
            timer.shutdown()

    asyncio.run(scenario())


def test_each_pass_rearms_the_wake_at_the_next_due_time(engine: Engine) -> None:
    # Nothing ticks within the test (tick = 1 h): every pass after the first is the wake job's.
    fake = FakeScheduler(wake=lambda now: utc_now() + timedelta(seconds=0.05))
    svc = service(engine, fake)
    asyncio.run(run_until(svc, fake, 4))
    assert fake.nows == sorted(fake.nows)
    assert fake.actors == {"scheduler:test"}
    assert svc.totals.passes >= 4


def test_the_tick_passes_when_nothing_is_due(engine: Engine) -> None:
    fake = FakeScheduler(wake=lambda now: None)
    svc = service(engine, fake, tick=0.1)
    asyncio.run(run_until(svc, fake, 3))
    assert svc.totals.passes >= 3


def test_a_wake_in_the_past_is_held_to_the_minimum_gap(engine: Engine) -> None:
    """A campaign the database keeps reporting as overdue costs a pass per gap, not a spin."""
    fake = FakeScheduler(wake=lambda now: now - timedelta(days=1))
    svc = service(engine, fake, min_gap=0.2)
    asyncio.run(run_until(svc, fake, 3))
    gaps = [b - a for a, b in zip(fake.nows, fake.nows[1:], strict=False)]
    assert all(gap >= timedelta(seconds=0.19) for gap in gaps), gaps


def test_the_gap_doubles_while_overdue_work_cannot_be_done_and_resets_when_it_is(
    engine: Engine,
) -> None:
    # The clock stands still, so each armed wake is exactly now + the gap chosen.
    fake = FakeScheduler(wake=lambda now: now - timedelta(hours=1), fired=lambda n: n == 4)
    svc = service(engine, fake, min_gap=0.01, tick=0.05)
    svc.clock = lambda: T0
    armed: list[datetime | None] = []
    arm = svc.timer.arm

    def recording(at: datetime | None) -> None:
        armed.append(at)
        arm(at)

    svc.timer.arm = recording  # type: ignore[method-assign]
    # Nine passes for eight gaps: the loop arms the wake after a pass only if it is not
    # stopping, and run_until stops it as soon as the last pass it waits for has finished, so
    # that pass's wake may or may not be armed (on a busy machine it was not). The ninth pass
    # starts only after the eighth wake was armed.
    asyncio.run(run_until(svc, fake, 9))
    gaps = [round((at - T0).total_seconds(), 3) for at in armed[:8] if at is not None]
    # Pass 4 fired something, the others nothing. The gap never exceeds the tick.
    assert gaps == [0.01, 0.02, 0.04, 0.01, 0.01, 0.02, 0.04, 0.05]


def test_the_injected_clock_is_the_passes_now(engine: Engine) -> None:
    fake = FakeScheduler(wake=lambda now: None)
    svc = service(engine, fake)
    svc.clock = lambda: T0
    assert asyncio.run(svc.once()).as_dict() == {"fired": 0}
    assert fake.nows == [T0]


def test_one_line_per_pass_that_did_something(engine: Engine) -> None:
    lines: list[str] = []
    fake = FakeScheduler(
        wake=lambda now: utc_now() + timedelta(seconds=0.02), fired=lambda n: n % 2
    )
    svc = service(engine, fake, lines)
    asyncio.run(run_until(svc, fake, 4))
    started, *passes = lines
    assert started == "scheduler running: a pass at least every 3600s"
    busy = [n for n in range(1, fake.finished + 1) if n % 2]
    assert len(passes) == len(busy) == svc.totals.busy_passes
    assert all(line.endswith(" fired 1") and "\n" not in line for line in passes)


def test_database_errors_are_one_line_then_backed_off_and_retried(engine: Engine) -> None:
    lines: list[str] = []
    fake = FakeScheduler(wake=lambda now: None, fail=3)
    svc = service(engine, fake, lines, backoff_first=0.01)
    asyncio.run(run_until(svc, fake, 1))
    assert lines[1:] == [
        "database error: server closed the connection; retrying in 0.01s",
        "database error: server closed the connection; retrying in 0.02s",
        "database error: server closed the connection; retrying in 0.04s",
    ]
    assert svc.totals.errors == 3


def test_the_backoff_never_exceeds_the_tick(engine: Engine) -> None:
    lines: list[str] = []
    fake = FakeScheduler(fail=6)
    svc = service(engine, fake, lines, tick=0.05, backoff_first=0.02)
    asyncio.run(run_until(svc, fake, 1))
    assert lines[-1] == "database error: server closed the connection; retrying in 0.05s"


def test_stop_lets_the_pass_under_way_finish(engine: Engine) -> None:
    gate = threading.Event()
    fake = FakeScheduler(gate=gate)
    svc = service(engine, fake)

    async def scenario() -> None:
        task = asyncio.create_task(svc.run())
        # The pass is under way (blocked in its thread) when the stop comes.
        assert await asyncio.to_thread(fake.entered.wait, DEADLINE)
        svc.stop()
        await asyncio.sleep(0)
        assert not task.done()
        gate.set()
        totals = await asyncio.wait_for(task, DEADLINE)
        assert totals.passes == 1
        assert fake.finished == 1
        assert svc.timer.scheduler is not None
        await _processed(svc.timer)  # shutdown is posted to the loop
        assert not svc.timer.scheduler.running

    asyncio.run(scenario())


def test_stop_while_idle_returns_at_once(engine: Engine) -> None:
    fake = FakeScheduler()
    svc = service(engine, fake)

    async def scenario() -> None:
        task = asyncio.create_task(svc.run())
        await fake.passes(1)
        svc.stop()
        await asyncio.wait_for(task, DEADLINE)

    asyncio.run(scenario())
    assert fake.finished == 1
