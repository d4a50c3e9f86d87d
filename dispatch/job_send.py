"""One claimed job's send, from the window re-check to its recorded outcome.

Before the point of no return (window, transport, ``prepare``) a problem ends the attempt with
nothing delivered. T4 is committed before any byte of the message can go out; after it, the
outcome is recorded under the lease token, retried while the lease lasts (then recovery owns the
job). The instrumentation is told at each named point.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from enum import Enum

from dispatch.held_leases import HeldLeases
from dispatch.instrumentation import Instrumentation
from dispatch.observer import NULL_OBSERVER, OUTCOME_BY_TARGET, WorkerObserver
from dispatch.outbox_client import OutboxClient
from dispatch.outcome_completion import completion_for
from dispatch.rate_gate import RateGate
from dispatch.relay_circuit import RelayGate
from dispatch.send_windows import UnreadableWindow, closed_until
from dispatch.states import State
from dispatch.store import ClaimedJob, Completion, Deferral, Lease, LeaseRow
from dispatch.transport import Outcome, Transport, TransportConfigError, Verdict, new_envelope
from dispatch.window_gate import WindowGate
from dispatch.worker_config import WorkerConfig
from dispatch.worker_report import WorkerReport

log = logging.getLogger("herald.worker")  # the worker's logger: these are the worker's events

PAYLOAD_PRUNED = "payload pruned"  # the outcome text of a claimed job whose payload is gone


class _NotStarted(Enum):
    """Why a job did not cross T4."""

    REFUSED = "T4's guard refused: the job is settled (``Settle``)"
    HANDED_BACK = "no slot of its rate limits: handed back until its slot (W3)"


class JobSender:
    def __init__(
        self,
        *,
        config: WorkerConfig,
        transports: Mapping[str, Transport],
        outbox: OutboxClient,
        instrumentation: Instrumentation,
        clock: Callable[[], datetime],
        leases: HeldLeases,
        windows: WindowGate,
        relay: RelayGate,
        report: WorkerReport,
        stopping: Callable[[], bool],
        stop_for: Callable[[TransportConfigError], None],
        rates: RateGate | None = None,
        observer: WorkerObserver = NULL_OBSERVER,
        slot_freed: Callable[[], None] = lambda: None,
    ) -> None:
        """``stopping`` says whether the worker is shutting down (claims not yet at T4 are
        then released); ``stop_for`` stops it because a transport cannot be used as
        configured; ``slot_freed`` is called when a send leaves the wire (``on_wire``)."""
        self.config = config
        self.transports = transports
        self.outbox = outbox
        self.instrumentation = instrumentation
        self.clock = clock
        self.leases = leases
        self.windows = windows
        self.relay = relay  # W4: prepare goes through the relay's circuit breaker
        self.report = report
        self.stopping = stopping
        self.stop_for = stop_for
        self.rates = rates  # told every outcome: a 421 slows the recipient's domain down
        self.observer = observer  # told each outcome and each delivery's duration (metrics)
        # Sends holding one of the worker's ``concurrency`` slots: from their start until their
        # transport call is over (the reply to DATA read, or the send ended before it). The
        # outcome's commit (T5) that follows holds no slot: the connection is already back in
        # the pool, and a slot held through the commit would leave that connection idle while
        # the relay could take the next message (measured: with 50 slots, ~40% fewer messages
        # in DATA at once than 50 connections, and so smaller groups at a grouping relay).
        # By lease, as everything about a send: the job may be claimed again (after a
        # hand-back) while this claim's send is still finishing (dispatch.held_leases).
        self._on_wire: set[Lease] = set()
        self.slot_freed = slot_freed

    @property
    def _owner(self) -> str:
        return self.config.owner

    @property
    def on_wire(self) -> int:
        """How many sends hold a concurrency slot (see ``_on_wire``)."""
        return len(self._on_wire)

    def occupy(self, job: ClaimedJob) -> None:
        """Count ``job`` on the wire from now (before its task first runs) until its send is
        off it."""
        self._on_wire.add(job.lease)

    async def send(self, job: ClaimedJob) -> None:
        try:
            await self._send_unguarded(job)
        finally:
            self.leases.drop(job.lease)
            if self.rates is not None:
                self.rates.forget(job.lease)
            self._off_the_wire(job)

    def _off_the_wire(self, job: ClaimedJob) -> None:
        if job.lease in self._on_wire:
            self._on_wire.discard(job.lease)
            self.slot_freed()

    async def _send_unguarded(self, job: ClaimedJob) -> None:
        transport = self.transports.get(job.channel)
        if transport is None:
            await self._finish(
                job,
                Outcome(Verdict.FAILED, None, f"no transport for channel {job.channel!r}"),
                before_data=True,
            )
            return
        if not job.payload:
            # Only ``herald prune`` empties a payload, and nothing re-arms a pruned job (D1 and
            # T9r refuse it): belt and braces, an empty message is never sent.
            await self._finish(job, Outcome(Verdict.FAILED, None, PAYLOAD_PRUNED), before_data=True)
            return
        if job.send_window is not None:  # most jobs have none: no clock read for them
            try:
                opens = closed_until(job.send_window, self.clock())
            except UnreadableWindow as exc:
                await self._finish(job, Outcome(Verdict.FAILED, None, str(exc)), before_data=True)
                return
            if opens is not None:  # the window closed while the job waited in the backlog
                await self.windows.hand_back([Deferral(job.lease, opens)])
                return
        envelope = new_envelope(  # Envelope(...) without the frozen __init__'s cost
            job.id, job.key, job.channel, job.sender, job.recipient, job.message_id, job.payload
        )
        # The receiver is asked to get ready (SMTP: DATA, to its 354) beside T4's commit, or
        # already with the rest of the preparation when the transport can (PIPELINING): its
        # round trip hides behind the commit or costs none, and nothing of the message goes out
        # before T4. A job that takes rate slots asks after its T4 (in deliver): a slot refused
        # at T4 (W3, common under a limit) would cost the connection, closed in the middle of
        # DATA.
        keys = self.rates.admitted_keys(job.lease) if self.rates is not None else ()
        try:
            prepared = await self.relay.prepare(transport, job, envelope, with_ready=not keys)
        except TransportConfigError as exc:
            # Nothing of this job went out and nothing is wrong with it: give it back as it
            # was (no attempt counted) and stop, since every other job would meet the same.
            self.stop_for(exc)
            await self.release(job)
            return
        except Exception as exc:  # a transport bug must not strand the job
            prepared = Outcome(Verdict.RETRY, None, f"before sending: {type(exc).__name__}: {exc}")
        if prepared is None:  # the relay is unreachable: handed back untouched (W4)
            return
        if isinstance(prepared, Outcome):
            await self._finish(job, prepared, before_data=True)
            return
        await self.instrumentation.after_rcpt(job)
        if self.stopping():
            await prepared.abandon()
            await self.release(job)
            return
        readying = None if keys else prepared.ready()
        try:
            started_at = await self._start_send(job, keys)
        except asyncio.CancelledError:
            if readying is not None:
                readying.cancel()  # the connection is closed: it may be waiting in DATA
            raise
        if not isinstance(started_at, datetime):
            await prepared.abandon()  # nothing of the message went out
            if started_at is _NotStarted.REFUSED:
                await self._settle(job)
            return
        await self.instrumentation.after_t4_commit(job)
        delivering = time.monotonic()
        outcome = await prepared.deliver(started_at)
        self._off_the_wire(job)  # the next send may use the connection while T5 commits
        self.observer.on_transport_call(job.channel, time.monotonic() - delivering)
        if outcome.verdict is Verdict.SENT:
            await self.instrumentation.after_250_before_t5(job)
        await self._finish(job, outcome, before_data=False)
        await self.instrumentation.after_t5_commit(job)

    async def _start_send(self, job: ClaimedJob, keys: tuple[str, ...]) -> datetime | _NotStarted:
        """T4, and the rule for a commit whose outcome is unknown: re-read before sending.

        A job under rate limits takes its slots in T4's own transaction (``RateGate.start``):
        the grant and the door to the wire are one moment, so the relay sees the limit.
        Returns when the job crossed T4 (the message's Date), or why it may not go out.
        ``keys``: the rate limits whose slots it takes (``RateGate.admitted_keys``).
        """
        await self.instrumentation.before_t4(job)
        while True:
            try:
                if not keys:
                    started = await self.outbox.start_send(job.lease)
                    return _NotStarted.REFUSED if started is None else started
                assert self.rates is not None
                slotted = await self.rates.start(job, keys)
                if slotted.started is not None:
                    return slotted.started
                return _NotStarted.REFUSED if slotted.due is None else _NotStarted.HANDED_BACK
            except Exception as exc:
                log.warning(
                    "T4 commit failed for job %s: %s; re-reading",
                    job.id,
                    exc,
                    extra={"event": "t4_commit_failed", "key": job.key, "worker": self._owner},
                )
            row = await self._reread(job)
            state = None if row is None else row.state
            if row is not None and row.state == State.SENDING.value:
                # Our T4 did commit: the row carries our token in sending, and the moment
                # it recorded, so the Date is the one a successful commit would have given.
                return row.send_started_at or self.clock()
            if keys and state == State.PENDING.value:
                # Refused a slot: W3 committed with our token. Counted as rate_limited, as
                # when the refusal's answer arrives (RateGate.start).
                assert self.rates is not None
                self.rates.handed_back(job)
                return _NotStarted.HANDED_BACK
            if state != State.CLAIMED.value or not self._lease_left(job):
                return _NotStarted.REFUSED

    async def _reread(self, job: ClaimedJob) -> LeaseRow | None:
        while self._lease_left(job):
            try:
                return await self.outbox.lease_state(job.lease)
            except Exception:
                await asyncio.sleep(0.5)
        return None

    def _lease_left(self, job: ClaimedJob) -> bool:
        """Whether the lease surely lasts past T4's margin (so a T4 may still be tried)."""
        return time.monotonic() < self.leases.deadline(job.lease) - self.config.t4_margin_seconds

    async def _settle(self, job: ClaimedJob) -> None:
        with contextlib.suppress(Exception):
            state = await self.outbox.settle(job.lease)
            if state is None:
                self.report.lost_leases += 1

    async def release(self, job: ClaimedJob) -> None:
        with contextlib.suppress(Exception):
            released = await self.outbox.release([job.lease])
            self.report.released += len(released)

    async def _finish(self, job: ClaimedJob, outcome: Outcome, *, before_data: bool) -> None:
        if self.rates is not None:
            await self.rates.observe(job, outcome)
        completion = completion_for(
            job, outcome, before_data=before_data, retry_base=self.config.retry_base_seconds
        )
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
                if time.monotonic() > self.leases.deadline(job.lease):
                    # The lease is gone: recovery owns the job now (R1/R2 decide its fate).
                    log.error(
                        "giving up recording job %s: %s",
                        job.id,
                        exc,
                        extra={"event": "record_failed", "key": job.key, "worker": self._owner},
                    )
                    return
                await asyncio.sleep(0.2)
        if not applied:
            self.report.lost_leases += 1
            return
        self.report.count_completion(completion.target)
        self.observer.on_outcome(OUTCOME_BY_TARGET.get(completion.target.value, "other"))
        self._log_outcome(job, completion)

    def _log_outcome(self, job: ClaimedJob, completion: Completion) -> None:
        """One line per recorded outcome: a failure, a retry or an in-doubt with its cause
        (the SMTP reply, or what went wrong); a send at debug."""
        event, level, what = _OUTCOME_LINES[completion.target]
        if not log.isEnabledFor(level):  # a send is a DEBUG line: skip building it per job
            return
        fields: dict[str, object] = {
            "event": event,
            "campaign": job.campaign,
            "step": job.step,
            "key": job.key,
            "worker": self._owner,
            "code": completion.code,
            "reason": completion.detail,
        }
        if completion.target is State.PENDING:
            fields["retry_in"] = round(completion.retry_in, 3)
        log.log(
            level,
            "%s: %s/%s %s: %s",
            what,
            job.campaign,
            job.step,
            job.key[:16],
            completion.detail or "(no reply)",
            extra=fields,
        )


# How each recorded outcome is logged: (event, level, words).
_OUTCOME_LINES: dict[State, tuple[str, int, str]] = {
    State.SENT: ("sent", logging.DEBUG, "sent"),
    State.PENDING: ("send_retry", logging.INFO, "send to retry"),
    State.FAILED: ("send_failed", logging.WARNING, "send failed"),
    State.IN_DOUBT: ("send_in_doubt", logging.WARNING, "send in doubt"),
}
