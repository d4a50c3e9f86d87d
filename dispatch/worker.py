"""The dispatch worker: claim in batches, send concurrently, every write fenced by token.

One asyncio loop runs up to ``concurrency`` sends on the wire (the commit of a send's outcome
holds no slot, ``JobSender.on_wire``); one database thread (GroupCommitter) turns
their transitions into few commits. A send crosses the point of no return only after its T4
commit has returned; every later write carries the lease token, so a worker that lost its lease
(paused, partitioned, slow) changes nothing. The worker talks to the outbox only through the
typed ``OutboxClient``, and tells its ``Instrumentation`` (a no-op unless a test gives one) at
each named point of a send.

A job whose send window (``dispatch.send_windows``) is closed on the worker's clock, when it is
claimed or when its send starts, is handed back until the window opens (W2), uncounted; one
that gets no slot of its campaign's or domain's rate limit, until its slot (W3,
``dispatch.rate_gate``). A relay that cannot be reached is not the jobs' fault either:
``dispatch.relay_circuit`` hands them back uncounted (W4) and holds claims while its circuit
breaker is open.

This module is the loops: claiming, heartbeats, recovery, shutdown. One job's send is
``dispatch.job_send.JobSender``; the leases held, ``dispatch.held_leases``; W2,
``dispatch.window_gate``; the settings and the counts, ``dispatch.worker_config`` and
``dispatch.worker_report`` (both importable from here, as before).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime

from sqlalchemy.engine import Engine

from dispatch.claim_room import claim_size
from dispatch.committer import GroupCommitter
from dispatch.failure_watch import FailureWatch
from dispatch.heap import frozen_heap
from dispatch.held_leases import HeldLeases
from dispatch.instrumentation import NULL_INSTRUMENTATION, Instrumentation
from dispatch.job_send import JobSender
from dispatch.observer import NULL_OBSERVER, WorkerObserver
from dispatch.outbox_client import OutboxClient
from dispatch.rate_gate import RateGate
from dispatch.relay_circuit import RelayGate
from dispatch.store import ClaimedJob, OutboxStore
from dispatch.transport import RelayUnavailable, Transport, TransportConfigError
from dispatch.window_gate import WindowGate
from dispatch.worker_config import WorkerConfig, default_owner
from dispatch.worker_report import WorkerReport

__all__ = ["Worker", "WorkerConfig", "WorkerReport", "default_owner", "utc_now"]

log = logging.getLogger("herald.worker")

# Seconds: the least a worker waits before claiming again for a job handed back and due (its
# due moment, on this host's clock, may not have come yet on the database's).
MIN_CLAIM_WAIT = 0.01


def utc_now() -> datetime:
    return datetime.now(UTC)


class Worker:
    def __init__(
        self,
        engine: Engine,
        transports: Mapping[str, Transport],
        config: WorkerConfig | None = None,
        *,
        instrumentation: Instrumentation = NULL_INSTRUMENTATION,
        store: OutboxStore | None = None,
        clock: Callable[[], datetime] = utc_now,
        failure_watch: FailureWatch | None = None,
        observer: WorkerObserver = NULL_OBSERVER,
    ) -> None:
        """``instrumentation`` watches the named points of every send (the transports take
        theirs separately); ``store`` defaults to this engine's ``OutboxStore``; ``clock``
        (aware UTC) is what send windows are checked against; ``failure_watch`` is told about
        permanent failures as they are recorded (``dispatch.failure_watch``); ``observer`` is
        told the totals as they happen (``dispatch.observer``: herald's metrics)."""
        self.config = config or WorkerConfig()
        self.clock = clock
        self.transports = transports
        self.store = store or OutboxStore(engine.dialect.name)
        self.committer = GroupCommitter(
            engine,
            self.store,
            owner=self.config.owner,
            lease_seconds=self.config.lease_seconds,
            t4_margin_seconds=self.config.t4_margin_seconds,
            instrumentation=instrumentation,
            failure_watch=failure_watch,
        )
        self._outbox = OutboxClient(self.committer)
        self.instrumentation = instrumentation
        self.observer = observer
        self.report = WorkerReport()
        self._stopping = asyncio.Event()
        self._wake = asyncio.Event()
        self._backlog: deque[ClaimedJob] = deque()
        self._inflight: set[asyncio.Task[None]] = set()
        # When a claim last started nothing (monotonic): the next waits for the poll interval,
        # or less when a job handed back for its rate slot is due sooner (``_next_claim_at``);
        # None once recovery has put jobs back (then they are claimed at once).
        self._dry_since: float | None = None
        self._next_recovery_in = self.config.recovery_interval
        self.leases = HeldLeases(self.config.lease_seconds)
        self.windows = WindowGate(self._outbox, self.leases, self.report)
        self.rates = RateGate(self.committer, self.leases, self.report, self.config.domain_rates)
        self.relay = RelayGate(
            self._outbox,
            self.leases,
            self.report,
            until_idle=self.config.until_idle,
            stop=self._stop_for,
            observer=observer,
        )
        self.sender = JobSender(
            config=self.config,
            transports=transports,
            outbox=self._outbox,
            instrumentation=instrumentation,
            clock=clock,
            leases=self.leases,
            windows=self.windows,
            rates=self.rates,
            relay=self.relay,
            report=self.report,
            stopping=lambda: self.stopping,
            stop_for=self._stop_for,
            observer=observer,
            slot_freed=self._slot_freed,
        )
        # A transport that cannot be used as configured stops the worker; run() raises it. So
        # does an unreachable relay with --until-idle (dispatch.relay_circuit).
        self.fatal: TransportConfigError | RelayUnavailable | None = None

    @property
    def outbox(self) -> OutboxClient:
        return self._outbox

    @outbox.setter
    def outbox(self, client: OutboxClient) -> None:
        # Tests swap in a client that injects faults; every part that writes must see it.
        self._outbox = client
        self.windows.outbox = client
        self.relay.outbox = client
        self.sender.outbox = client

    # ------------------------------------------------------------ control

    def stop(self) -> None:
        """Graceful: stop claiming, release unstarted claims, let started sends finish."""
        self._stopping.set()
        self._wake.set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def _stop_for(self, error: TransportConfigError | RelayUnavailable) -> None:
        """Stop because a transport cannot be used as configured (or, with --until-idle, the
        relay is unreachable); run() raises the first."""
        if self.fatal is None:
            self.fatal = error
        self.stop()

    async def run(self) -> WorkerReport:
        with frozen_heap():  # full GC passes skip what already exists (dispatch.heap)
            return await self._run()

    async def _run(self) -> WorkerReport:
        self.committer.start()
        background: list[asyncio.Task[None]] = []
        try:
            # The first claim goes before the first recovery pass, which runs once it has
            # committed, while the first sends open their connections: a worker's first
            # messages do not wait for recovery's statements (a fresh process plans them
            # cold). Its jobs are admitted once this worker's rate limits are written and read.
            # Nothing depends on the order: a claim takes due pending jobs, recovery only
            # expired leases, and recovery always runs beside claims; jobs it puts back are
            # claimed at once (``_recover``), and the idle check comes only after it.
            priming = asyncio.ensure_future(self.rates.prime())  # neither raises
            if not self.stopping:
                await self._claim(self._claim_size(), priming)
                self._start_sends()
            await priming
            await self._recover()
            background = [
                asyncio.create_task(self._heartbeat_loop(), name="heartbeat"),
                asyncio.create_task(self._recovery_loop(), name="recovery"),
            ]
            await self._dispatch_loop()
            await self._drain()
        finally:
            for task in background:
                task.cancel()
            for task in background:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            for transport in self.transports.values():
                with contextlib.suppress(Exception):
                    await transport.aclose()
            await asyncio.to_thread(self.committer.stop)
        if self.fatal is not None:
            raise self.fatal
        return self.report

    # ------------------------------------------------------------ main loop

    async def _dispatch_loop(self) -> None:
        cfg = self.config
        prefetch = cfg.concurrency * 2
        while not self.stopping:
            size = self._claim_size()
            recently_dry = time.monotonic() < self._next_claim_at()
            claimed = 0
            # While the relay is known down, claiming would only hand jobs straight back.
            if size and not recently_dry and not self.relay.holding():
                claimed = len(await self._claim(size))
                self._dry_since = None if claimed else time.monotonic()
            self._start_sends()
            if claimed and len(self._backlog) + len(self._inflight) < prefetch:
                continue  # the queue is flowing: fill up before waiting
            if self._inflight or self._backlog:
                self._wake.clear()
                await self._wait_wake(self._until_next_claim())
                continue
            if cfg.until_idle and not await self._has_work():
                return
            self._wake.clear()
            await self._wait_wake(await self._idle_wait())

    def _claim_size(self) -> int:
        """A wave at most; no claim for a straggler (``dispatch.claim_room``)."""
        return claim_size(
            concurrency=self.config.concurrency,
            backlog=len(self._backlog),
            inflight=len(self._inflight),
        )

    def _next_claim_at(self) -> float:
        """When a claim is worth making (monotonic): at once, unless the last one started
        nothing; then after the poll interval, or as soon as a job this worker handed back
        until its rate slot is due (at 50/s a slot comes every 20 ms: waiting the poll
        interval left the limit a third unused)."""
        if self._dry_since is None:
            return 0.0
        at = self._dry_since + self.config.poll_interval
        due = self.rates.next_due()
        if due is not None:
            at = min(at, max(due, self._dry_since + MIN_CLAIM_WAIT))
        return at

    def _until_next_claim(self) -> float:
        """How long the loop may wait for a send to end before it should claim again."""
        return min(self.config.poll_interval, self._next_claim_at() - time.monotonic())

    def _start_sends(self) -> None:
        """Give every free slot a job of the backlog. A slot is a send on the wire; sends whose
        outcome is being committed hold none."""
        while self._backlog and self.sender.on_wire < self.config.concurrency:
            job = self._backlog.popleft()
            self.sender.occupy(job)
            task = asyncio.create_task(self.sender.send(job))
            self._inflight.add(task)
            task.add_done_callback(self._on_task_done)

    def _slot_freed(self) -> None:
        """A send left the wire: its slot goes to the next job of the backlog at once, not
        when the dispatch loop next runs (it may be waiting for a claim's commit, and the
        relay connection would idle meanwhile); the loop is woken to claim more."""
        if not self.stopping:  # stopping: unstarted claims are released, never started
            self._start_sends()
        self._wake.set()

    def _on_task_done(self, task: asyncio.Task[None]) -> None:
        self._inflight.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error(
                "send task failed",
                exc_info=task.exception(),
                extra={"event": "send_task_failed", "worker": self.config.owner},
            )
        self._wake.set()

    async def _wait_wake(self, timeout: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout=max(0.01, timeout))

    async def _claim(
        self, room: int, before_admission: Awaitable[None] | None = None
    ) -> list[ClaimedJob]:
        """Claim up to ``room`` jobs; the ones that may go out now join the backlog and are
        returned (those outside their send window are handed back at once). The first claim
        admits its jobs once ``before_admission`` (the first rate read) is done."""
        asked_at = time.monotonic()
        try:
            jobs = await self.outbox.claim(room)
            if before_admission is not None:
                await before_admission
        except Exception as exc:
            log.warning(
                "claim failed (will retry): %s",
                exc,
                extra={"event": "claim_failed", "worker": self.config.owner},
            )
            await asyncio.sleep(self.config.poll_interval)
            return []
        self.leases.hold(jobs, time.monotonic())
        self.rates.claimed_at(asked_at)  # what was due then, this claim took
        self.report.claimed += len(jobs)
        if jobs:
            self.observer.on_claim_batch(len(jobs))
            log.debug(
                "claimed %d job(s)",
                len(jobs),
                extra={"event": "claim_batch", "count": len(jobs), "worker": self.config.owner},
            )
            await self.instrumentation.after_claim_commit(jobs)
        ready = await self.rates.admit(await self.windows.admit(jobs, self.clock()))
        self._backlog.extend(ready)
        return ready

    async def _has_work(self) -> bool:
        try:
            return await self.outbox.has_work(self.config.idle_horizon_seconds)
        except Exception as exc:
            log.warning(
                "idle check failed: %s",
                exc,
                extra={"event": "idle_check_failed", "worker": self.config.owner},
            )
            return True

    async def _idle_wait(self) -> float:
        try:
            due = await self.outbox.next_due_in()
        except Exception:
            return self.config.poll_interval
        if due is None:
            return self.config.poll_interval
        return min(self.config.poll_interval, max(0.01, due))

    # ------------------------------------------------------------ background loops

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.heartbeat_interval)
            leases = self.leases.leases()
            if not leases:
                continue
            sent_at = time.monotonic()
            try:
                alive = await self.outbox.heartbeat(leases)
            except Exception as exc:
                log.warning(
                    "heartbeat failed: %s",
                    exc,
                    extra={"event": "heartbeat_failed", "worker": self.config.owner},
                )
                continue
            self.leases.renew(leases, alive, sent_at)

    async def _recovery_loop(self) -> None:
        # Each pass is timed to the earliest lease the previous one saw held: a dead worker's
        # claims are taken back at their expiry, not up to an interval later.
        while True:
            await asyncio.sleep(self._next_recovery_in)
            await self._recover()

    async def _recover(self) -> None:
        self._next_recovery_in = self.config.recovery_interval
        try:
            report = await self.outbox.recover(self.config.recovery_grace_seconds)
        except Exception as exc:
            log.warning(
                "recovery pass failed: %s",
                exc,
                extra={"event": "recovery_failed", "worker": self.config.owner},
            )
            return
        self._next_recovery_in = self.config.next_recovery_in(report.held)
        if report.released or report.resent:
            # Jobs are pending again: claim them now, not after the idle poll.
            self._dry_since = None
            self._wake.set()
        self.observer.on_recovery(report)
        self.report.recovered += report.released + report.in_doubt + report.dead
        if report.released or report.in_doubt or report.dead:
            log.info(
                "recovery: %d released, %d in doubt, %d dead",
                report.released,
                report.in_doubt,
                report.dead,
                extra={
                    "event": "recovered",
                    "worker": self.config.owner,
                    "released": report.released,
                    "in_doubt": report.in_doubt,
                    "dead": report.dead,
                },
            )

    # ------------------------------------------------------------ shutdown

    async def _drain(self) -> None:
        """Release unstarted claims at once; give started sends a bounded grace period."""
        backlog = [job.lease for job in self._backlog]
        self._backlog.clear()
        if backlog:
            with contextlib.suppress(Exception):
                released = await self.outbox.release(backlog)
                self.report.released += len(released)
        if not self._inflight:
            return
        _, pending = await asyncio.wait(
            set(self._inflight), timeout=self.config.shutdown_grace_seconds
        )
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=10)
