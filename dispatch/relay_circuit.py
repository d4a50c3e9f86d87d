"""Relay outages in the worker: a circuit breaker per channel, and W4 hand-backs.

A connection refused, a DNS failure, a connect timeout, a TLS failure or a refused login says
nothing about the recipient (``dispatch.transport.RelayUnavailable``), so the job must not pay
for it: its claim goes back to ``pending`` uncounted (W4), no attempt spent, due when the
relay is next tried. Without this a wrong port or a ten-minute outage burnt every job's claims
one T6 at a time until recovery dead-lettered them (R3) with no attempt ever made.

The breaker (``RelayCircuit``): closed while the relay answers. The first failure opens it —
logged once, at once, as one line (cause and redacted relay), and recorded in ``relay_status``
for ``herald status``. While open, the worker claims nothing (``holding``) and the sends it
already holds are handed back. When the backoff has passed (1 s, doubling to 30 s) the next
send is the probe (half-open): the one send that tries the relay; sends arriving meanwhile
wait for its verdict. A probe that reaches the relay closes the breaker and marks the relay ok
again; one that fails re-opens it with the doubled backoff.

With ``--until-idle`` the worker does not wait for the relay: the first failure stops it
(``stop``), and ``herald worker`` exits 1 with that one line.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from enum import StrEnum

from dispatch.held_leases import HeldLeases
from dispatch.observer import NULL_OBSERVER, WorkerObserver
from dispatch.outbox_client import OutboxClient
from dispatch.store import ClaimedJob
from dispatch.transport import Envelope, Outcome, PreparedSend, RelayUnavailable, Transport
from dispatch.worker_report import WorkerReport

log = logging.getLogger("herald.worker")  # the worker's logger: these are the worker's events

BASE_BACKOFF = 1.0  # seconds the breaker stays open after the first failure
MAX_BACKOFF = 30.0  # an outage's end is noticed within this long
OK_REPORT_INTERVAL = 10.0  # seconds between "relay ok" reports while sends succeed


class CircuitState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"  # one probe is trying the relay


class RelayCircuit:
    """One relay's breaker, on the monotonic clock. Not thread-safe: one event loop."""

    def __init__(
        self,
        *,
        base: float = BASE_BACKOFF,
        cap: float = MAX_BACKOFF,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.base = base
        self.cap = cap
        self.clock = clock
        self.state = CircuitState.CLOSED
        self.openings = 0  # consecutive failed tries since the relay last answered
        self.open_until = 0.0
        self.down_since: float | None = None
        self.error: RelayUnavailable | None = None  # the latest failure
        self._verdict = asyncio.Event()  # set when the probe in flight has its answer

    def wait(self) -> float:
        """Seconds until the relay may be tried again (0: now, or closed)."""
        if self.state is not CircuitState.OPEN:
            return 0.0
        return max(0.0, self.open_until - self.clock())

    async def admit(self) -> tuple[bool, bool]:
        """(may this send try the relay, is it the probe). While a probe is out, wait for its
        verdict; then go if it closed the breaker."""
        if self.state is CircuitState.CLOSED:
            return True, False
        if self.state is CircuitState.OPEN:
            if self.wait() > 0:
                return False, False
            self.state = CircuitState.HALF_OPEN
            self._verdict = asyncio.Event()
            return True, True
        await self._verdict.wait()
        return self.closed, False

    def holding(self) -> bool:
        """Open and not yet due for a probe, or a probe out."""
        return self.state is CircuitState.HALF_OPEN or self.wait() > 0

    @property
    def closed(self) -> bool:
        return self.state is CircuitState.CLOSED

    def failed(self, error: RelayUnavailable) -> bool:
        """The relay could not be reached. True if this opened a closed breaker (an outage
        starts: say so); a failed probe re-opens it with a longer backoff."""
        self.error = error
        if self.state is CircuitState.OPEN:
            return False  # a send that started before the breaker opened: nothing new
        opened = self.state is CircuitState.CLOSED
        if opened:
            self.down_since = self.clock()
        self.openings += 1
        backoff = min(self.cap, self.base * 2 ** (self.openings - 1))
        self.state = CircuitState.OPEN
        self.open_until = self.clock() + backoff
        self._verdict.set()
        return opened

    def succeeded(self, *, probe: bool) -> float | None:
        """The relay answered. If that ended an outage, how long it lasted (seconds).

        Once the breaker is open only its probe's answer closes it, as only a failure of a
        send admitted while it was closed opens it (``failed``): a send admitted before the
        outage may be answered on a connection made before it (a pooled one), which says
        nothing about the relay now. Closing on that answer made the breaker flap: claims
        resumed, the next new connection failed, and one outage was announced twice."""
        if not probe and self.state is not CircuitState.CLOSED:
            return None
        down_since = self.down_since
        self.state = CircuitState.CLOSED
        self.openings = 0
        self.down_since = None
        self._verdict.set()
        return None if down_since is None else self.clock() - down_since

    def abandon_probe(self) -> None:
        """The probe ended without a verdict on the relay (a bug, a cancellation): open again
        with the current backoff, so a later send probes."""
        if self.state is CircuitState.HALF_OPEN:
            self.state = CircuitState.OPEN
            self.open_until = self.clock()
            self._verdict.set()


class RelayGate:
    """The worker's side of relay outages: every send's ``prepare`` goes through ``prepare``
    here (one call in ``dispatch.job_send``), the dispatch loop asks ``holding``."""

    def __init__(
        self,
        outbox: OutboxClient,
        leases: HeldLeases,
        report: WorkerReport,
        *,
        until_idle: bool,
        stop: Callable[[RelayUnavailable], None],
        observer: WorkerObserver = NULL_OBSERVER,
    ) -> None:
        self.outbox = outbox
        self.leases = leases
        self.report = report
        self.until_idle = until_idle
        self.stop = stop
        self.observer = observer  # told each relay's reachability as it is reported
        self.circuits: dict[str, RelayCircuit] = {}  # by channel: one relay each
        self.new_circuit: Callable[[], RelayCircuit] = RelayCircuit  # tests shorten backoffs
        self._ok_reported: dict[str, float] = {}  # relay -> monotonic time of the last report

    def holding(self) -> bool:
        """True while a breaker is open and not yet due for its probe, or its probe is out:
        claim nothing (the relay cannot take it). Once due, claims resume and the first send
        is the probe."""
        return any(c.holding() for c in self.circuits.values())

    async def prepare(
        self, transport: Transport, job: ClaimedJob, envelope: Envelope, *, with_ready: bool
    ) -> PreparedSend | Outcome | None:
        """``transport.prepare`` unless the relay is known down. None: the job was handed
        back (W4) because the relay is unreachable; nothing of it was counted."""
        circuit = self.circuits.get(job.channel)
        if circuit is None:
            circuit = self.circuits[job.channel] = self.new_circuit()
        go, probe = await circuit.admit()
        if not go:
            assert circuit.error is not None  # an open breaker always has its cause
            await self._hand_back(job, circuit, circuit.error)
            return None
        try:
            prepared = await transport.prepare(envelope, with_ready=with_ready)
        except RelayUnavailable as exc:
            if circuit.failed(exc):
                await self._outage_began(exc, circuit)
            elif probe:
                # Debug: the outage was said once when it began, and its end will be.
                log.debug(
                    "%s; still unreachable, next try in %.0fs",
                    exc.line,
                    circuit.wait(),
                    extra=_relay_fields("relay_still_unreachable", exc, circuit),
                )
                await self._report(exc.relay, reachable=False, error=exc.cause)
            await self._hand_back(job, circuit, exc)
            return None
        except BaseException:
            if probe:
                circuit.abandon_probe()
            raise
        outage = circuit.succeeded(probe=probe)
        if not circuit.closed:
            return prepared  # answered on a connection from before the outage: the probe decides
        relay = getattr(transport, "relay_name", None)
        if isinstance(relay, str):
            await self._relay_answered(relay, outage)
        return prepared

    async def _outage_began(self, exc: RelayUnavailable, circuit: RelayCircuit) -> None:
        if self.until_idle:
            # The run ends now and its caller prints this line: log nothing (one line only).
            self.stop(exc)
        else:
            log.warning(
                "%s; sends held, next try in %.0fs",
                exc.line,
                circuit.wait(),
                extra=_relay_fields("relay_unreachable", exc, circuit),
            )
        await self._report(exc.relay, reachable=False, error=exc.cause)

    async def _relay_answered(self, relay: str, outage: float | None) -> None:
        now = time.monotonic()
        if outage is not None:
            log.warning(
                "relay reachable again after %.0fs (%s)",
                outage,
                relay,
                extra={"event": "relay_reachable", "relay": relay, "outage": round(outage, 3)},
            )
        elif now - self._ok_reported.get(relay, -OK_REPORT_INTERVAL) < OK_REPORT_INTERVAL:
            return
        # Also when this worker saw no outage: another worker may have recorded one, and a send
        # that succeeds here is the proof it is over. A no-op UPDATE unless it is recorded down.
        self._ok_reported[relay] = now
        await self._report(relay, reachable=True, error=None)

    async def _report(self, relay: str, *, reachable: bool, error: str | None) -> None:
        self.observer.on_relay_state(relay, reachable)
        try:
            await self.outbox.report_relay(relay, reachable=reachable, error=error)
        except Exception as exc:  # the status is for people; sending does not depend on it
            log.warning(
                "recording the relay's status failed: %s",
                exc,
                extra={"event": "relay_status_failed", "relay": relay},
            )

    async def _hand_back(
        self, job: ClaimedJob, circuit: RelayCircuit, error: RelayUnavailable
    ) -> None:
        """W4 for this claim, due when the breaker next lets a send try the relay. If the write
        fails, the claim lapses and recovery gives it back (R1)."""
        self.leases.drop(job.lease)
        try:
            done = await self.outbox.relay_hand_back(
                [job.lease], retry_in=circuit.wait(), why=error.line
            )
        except Exception as exc:
            log.warning(
                "handing back job %s (relay unreachable) failed: %s",
                job.id,
                exc,
                extra={"event": "hand_back_failed", "key": job.key},
            )
            return
        self.report.relay_unavailable += len(done)


def _relay_fields(event: str, exc: RelayUnavailable, circuit: RelayCircuit) -> dict[str, object]:
    return {
        "event": event,
        "relay": exc.relay,
        "cause": exc.cause,
        "detail": exc.detail,
        "retry_in": round(circuit.wait(), 3),
    }
