"""The dispatch worker: claim in batches, send concurrently, every write fenced by token.

One asyncio loop runs up to ``concurrency`` sends; one database thread (GroupCommitter) turns
their transitions into few commits. A send crosses the point of no return only after its T4
commit has returned; every later write carries the lease token, so a worker that lost its lease
(paused, partitioned, slow) changes nothing. The worker talks to the outbox only through the
typed ``OutboxClient``, and tells its ``Instrumentation`` (a no-op unless a test gives one) at
each named point of a send.

A job whose send window (``dispatch.send_windows``) is closed on the worker's clock, when it is
claimed or when its send starts, is handed back until the window opens (W2), uncounted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy.engine import Engine

from dispatch.backoff import BASE_DELAY, retry_delay
from dispatch.committer import GroupCommitter
from dispatch.instrumentation import NULL_INSTRUMENTATION, Instrumentation
from dispatch.outbox_client import OutboxClient
from dispatch.send_windows import UnreadableWindow, closed_until, outside_their_window
from dispatch.states import State
from dispatch.store import ClaimedJob, Completion, Deferral, LeaseRow, OutboxStore
from dispatch.transport import Envelope, Outcome, Transport, TransportConfigError, Verdict

log = logging.getLogger("herald.worker")


def default_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class WorkerConfig:
    concurrency: int = 20
    lease_seconds: float = 120.0
    # T4 needs this much lease left, so a send never starts on a lease about to lapse.
    t4_margin_seconds: float = 10.0
    poll_interval: float = 1.0  # seconds between claims when the queue is empty
    recovery_interval: float = 5.0
    recovery_grace_seconds: float = 2.0
    shutdown_grace_seconds: float = 30.0
    retry_base_seconds: float = BASE_DELAY
    until_idle: bool = False
    idle_horizon_seconds: float = 60.0  # --until-idle waits for jobs due within this
    owner: str = field(default_factory=default_owner)

    @property
    def heartbeat_interval(self) -> float:
        return self.lease_seconds / 3


@dataclass
class WorkerReport:
    claimed: int = 0
    sent: int = 0
    retried: int = 0
    failed: int = 0
    in_doubt: int = 0
    released: int = 0
    outside_window: int = 0  # claims handed back until their send window opens (W2)
    lost_leases: int = 0
    recovered: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


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
    ) -> None:
        """``instrumentation`` watches the named points of every send (the transports take
        theirs separately); ``store`` defaults to this engine's ``OutboxStore``; ``clock``
        (aware UTC) is what send windows are checked against."""
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
        )
        self.outbox = OutboxClient(self.committer)
        self.instrumentation = instrumentation
        self.report = WorkerReport()
        self._stopping = asyncio.Event()
        self._wake = asyncio.Event()
        self._backlog: deque[ClaimedJob] = deque()
        self._inflight: set[asyncio.Task[None]] = set()
        self._held: dict[int, ClaimedJob] = {}  # jobs we hold a lease on
        self._lease_deadline: dict[int, float] = {}  # monotonic time the lease surely lasts to
        self._past_t4: set[int] = set()
        # A transport that cannot be used as configured stops the worker; run() raises it.
        self.fatal: TransportConfigError | None = None

    # ------------------------------------------------------------ control

    def stop(self) -> None:
        """Graceful: stop claiming, release unstarted claims, let started sends finish."""
        self._stopping.set()
        self._wake.set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    async def run(self) -> WorkerReport:
        self.committer.start()
        background: list[asyncio.Task[None]] = []
        try:
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
        dry_since: float | None = None  # when a claim last came back empty
        while not self.stopping:
            room = prefetch - len(self._backlog) - len(self._inflight)
            worth_claiming = room > 0 and (not self._backlog or room >= cfg.concurrency // 2)
            recently_dry = dry_since is not None and (
                time.monotonic() - dry_since < cfg.poll_interval
            )
            claimed = 0
            if worth_claiming and not recently_dry:
                claimed = len(await self._claim(room))
                dry_since = None if claimed else time.monotonic()
            while self._backlog and len(self._inflight) < cfg.concurrency:
                task = asyncio.create_task(self._send(self._backlog.popleft()))
                self._inflight.add(task)
                task.add_done_callback(self._on_task_done)
            if claimed and len(self._backlog) + len(self._inflight) < prefetch:
                continue  # the queue is flowing: fill up before waiting
            if self._inflight or self._backlog:
                self._wake.clear()
                await self._wait_wake(cfg.poll_interval)
                continue
            if cfg.until_idle and not await self._has_work():
                return
            self._wake.clear()
            await self._wait_wake(await self._idle_wait())

    def _on_task_done(self, task: asyncio.Task[None]) -> None:
        self._inflight.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("send task failed", exc_info=task.exception())
        self._wake.set()

    async def _wait_wake(self, timeout: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout=max(0.01, timeout))

    async def _claim(self, room: int) -> list[ClaimedJob]:
        """Claim up to ``room`` jobs; the ones that may go out now join the backlog and are
        returned (those outside their send window are handed back at once)."""
        try:
            jobs = await self.outbox.claim(room)
        except Exception as exc:
            log.warning("claim failed (will retry): %s", exc)
            await asyncio.sleep(self.config.poll_interval)
            return []
        now = time.monotonic()
        for job in jobs:
            self._held[job.id] = job
            self._lease_deadline[job.id] = now + self.config.lease_seconds
        self.report.claimed += len(jobs)
        if jobs:
            await self.instrumentation.after_claim_commit(jobs)
        deferrals = outside_their_window(jobs, self.clock())
        if deferrals:
            await self._defer(deferrals)
        deferred = {d.lease[0] for d in deferrals}
        ready = [job for job in jobs if job.id not in deferred]
        self._backlog.extend(ready)
        return ready

    async def _defer(self, deferrals: list[Deferral]) -> None:
        """W2 for these claims. They are never sent by this worker, whatever the outcome: if
        the write fails, the claims lapse and recovery gives them back (R1)."""
        for deferral in deferrals:
            self._held.pop(deferral.lease[0], None)
            self._lease_deadline.pop(deferral.lease[0], None)
        try:
            deferred = await self.outbox.defer(deferrals)
        except Exception as exc:
            log.warning(
                "handing back %d claims outside their window failed: %s", len(deferrals), exc
            )
            return
        self.report.outside_window += len(deferred)

    async def _has_work(self) -> bool:
        try:
            return await self.outbox.has_work(self.config.idle_horizon_seconds)
        except Exception as exc:
            log.warning("idle check failed: %s", exc)
            return True

    async def _idle_wait(self) -> float:
        try:
            due = await self.outbox.next_due_in()
        except Exception:
            return self.config.poll_interval
        if due is None:
            return self.config.poll_interval
        return min(self.config.poll_interval, max(0.01, due))

    # ------------------------------------------------------------ one send

    async def _send(self, job: ClaimedJob) -> None:
        try:
            await self._send_unguarded(job)
        finally:
            self._held.pop(job.id, None)
            self._lease_deadline.pop(job.id, None)
            self._past_t4.discard(job.id)

    async def _send_unguarded(self, job: ClaimedJob) -> None:
        transport = self.transports.get(job.channel)
        if transport is None:
            await self._finish(
                job,
                Outcome(Verdict.FAILED, None, f"no transport for channel {job.channel!r}"),
                before_data=True,
            )
            return
        try:
            opens = closed_until(job.send_window, self.clock())
        except UnreadableWindow as exc:
            await self._finish(job, Outcome(Verdict.FAILED, None, str(exc)), before_data=True)
            return
        if opens is not None:  # the window closed while the job waited in the backlog
            await self._defer([Deferral(job.lease, opens)])
            return
        envelope = Envelope(
            job_id=job.id,
            key=job.key,
            channel=job.channel,
            sender=job.sender,
            recipient=job.recipient,
            message_id=job.message_id,
            payload=job.payload,
        )
        try:
            prepared = await transport.prepare(envelope)
        except TransportConfigError as exc:
            # Nothing of this job went out and nothing is wrong with it: give it back as it
            # was (no attempt counted) and stop, since every other job would meet the same.
            if self.fatal is None:
                self.fatal = exc
            self.stop()
            await self._release(job)
            return
        except Exception as exc:  # a transport bug must not strand the job
            prepared = Outcome(Verdict.RETRY, None, f"before sending: {type(exc).__name__}: {exc}")
        if isinstance(prepared, Outcome):
            await self._finish(job, prepared, before_data=True)
            return
        await self.instrumentation.after_rcpt(job)
        if self.stopping:
            await prepared.abandon()
            await self._release(job)
            return
        started_at = await self._start_send(job)
        if started_at is None:
            await prepared.abandon()
            await self._settle(job)
            return
        self._past_t4.add(job.id)
        await self.instrumentation.after_t4_commit(job)
        outcome = await prepared.deliver(started_at)
        if outcome.verdict is Verdict.SENT:
            await self.instrumentation.after_250_before_t5(job)
        await self._finish(job, outcome, before_data=False)
        await self.instrumentation.after_t5_commit(job)

    async def _start_send(self, job: ClaimedJob) -> datetime | None:
        """T4, and the rule for a commit whose outcome is unknown: re-read before sending.

        Returns when the job crossed T4 (the message's Date), or None if it may not go out.
        """
        await self.instrumentation.before_t4(job)
        while True:
            try:
                return await self.outbox.start_send(job.lease)
            except Exception as exc:
                log.warning("T4 commit failed for job %s: %s; re-reading", job.id, exc)
            row = await self._reread(job)
            state = None if row is None else row.state
            if row is not None and row.state == State.SENDING.value:
                # Our T4 did commit: the row carries our token in sending, and the moment
                # it recorded, so the Date is the one a successful commit would have given.
                return row.send_started_at or self.clock()
            if state != State.CLAIMED.value or not self._lease_left(job):
                return None

    async def _reread(self, job: ClaimedJob) -> LeaseRow | None:
        while self._lease_left(job):
            try:
                return await self.outbox.lease_state(job.lease)
            except Exception:
                await asyncio.sleep(0.5)
        return None

    def _lease_left(self, job: ClaimedJob) -> bool:
        deadline = self._lease_deadline.get(job.id, 0.0)
        return time.monotonic() < deadline - self.config.t4_margin_seconds

    async def _settle(self, job: ClaimedJob) -> None:
        with contextlib.suppress(Exception):
            state = await self.outbox.settle(job.lease)
            if state is None:
                self.report.lost_leases += 1

    async def _release(self, job: ClaimedJob) -> None:
        with contextlib.suppress(Exception):
            released = await self.outbox.release([job.lease])
            self.report.released += len(released)

    async def _finish(self, job: ClaimedJob, outcome: Outcome, *, before_data: bool) -> None:
        completion = self._completion(job, outcome, before_data=before_data)
        # Completion writes are retried while the lease lasts; after that recovery owns the job.
        failed_before = False
        while True:
            try:
                applied = await self.outbox.complete(completion)
                if not applied and failed_before:
                    # An earlier attempt may have committed with its acknowledgement lost.
                    row = await self.outbox.lease_state(job.lease)
                    applied = row is not None and row.state == completion.target.value
                break
            except Exception as exc:
                failed_before = True
                if time.monotonic() > self._lease_deadline.get(job.id, 0.0):
                    # The lease is gone: recovery owns the job now (R1/R2 decide its fate).
                    log.error("giving up recording job %s: %s", job.id, exc)
                    return
                await asyncio.sleep(0.2)
        if not applied:
            self.report.lost_leases += 1
            return
        if completion.target is State.SENT:
            self.report.sent += 1
        elif completion.target is State.PENDING:
            self.report.retried += 1
        elif completion.target is State.FAILED:
            self.report.failed += 1
        elif completion.target is State.IN_DOUBT:
            self.report.in_doubt += 1

    def _completion(self, job: ClaimedJob, outcome: Outcome, *, before_data: bool) -> Completion:
        base = self.config.retry_base_seconds
        verdict = outcome.verdict
        if verdict is Verdict.SENT:
            return Completion(job.lease, State.SENT, outcome.code, outcome.text)
        if verdict is Verdict.IN_DOUBT:
            return Completion(
                job.lease, State.IN_DOUBT, outcome.code, outcome.text, in_doubt_reason=outcome.text
            )
        if verdict is Verdict.RETRY:
            used = job.claims if before_data else job.send_attempts + 1
            if before_data or used < job.max_send_attempts:
                delay = retry_delay(used, retry_after=outcome.retry_after, base=base)
                return Completion(
                    job.lease,
                    State.PENDING,
                    outcome.code,
                    outcome.text,
                    retry_in=delay,
                    before_data=before_data,
                )
            text = f"attempts exhausted; last: {outcome.text}"
            return Completion(job.lease, State.FAILED, outcome.code, text)
        return Completion(
            job.lease, State.FAILED, outcome.code, outcome.text, before_data=before_data
        )

    # ------------------------------------------------------------ background loops

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.heartbeat_interval)
            leases = [job.lease for job in self._held.values()]
            if not leases:
                continue
            sent_at = time.monotonic()
            try:
                alive = await self.outbox.heartbeat(leases)
            except Exception as exc:
                log.warning("heartbeat failed: %s", exc)
                continue
            for job_id, _ in leases:
                if job_id in alive:
                    self._lease_deadline[job_id] = sent_at + self.config.lease_seconds
                elif job_id in self._held:
                    # Not revived: the job may already belong to someone else. Our later
                    # writes will match nothing; stop trusting the local deadline now.
                    self._lease_deadline[job_id] = 0.0

    async def _recovery_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.recovery_interval)
            await self._recover()

    async def _recover(self) -> None:
        try:
            report = await self.outbox.recover(self.config.recovery_grace_seconds)
        except Exception as exc:
            log.warning("recovery pass failed: %s", exc)
            return
        self.report.recovered += report.released + report.in_doubt + report.dead
        if report.released or report.in_doubt or report.dead:
            log.info(
                "recovery: %d released, %d in doubt, %d dead",
                report.released,
                report.in_doubt,
                report.dead,
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
