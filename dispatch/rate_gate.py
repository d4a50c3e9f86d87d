"""W3 in the worker: a send takes its rate-limit slots in its T4 transaction, or goes back.

The limits (``dispatch.rates``) are shared by every worker through the ``rate_limit`` table: a
campaign's (``rate: 50/s`` in its file, written there at launch) and its recipient domain's
(the defaults, or ``HERALD_DOMAIN_RATES``; each worker writes its own at start, so the workers
of one deployment must share the setting).

The slot is taken at the door to the wire, not at the claim: ``SlotThenStart`` takes the
slots a job needs and performs its T4 (claimed → sending) in ONE transaction, so the moment the
job may be sent and the moment its slot was granted are one database moment (T4's
``send_started_at``: the same ``now()`` on PostgreSQL; SQLite reads its clock per statement,
milliseconds apart, with the write lock held in between). A job then goes out on a
connection it already holds (RCPT accepted), so the relay sees at most ``rate * t + burst``
sends in any window of ``t`` seconds however the worker's tasks were scheduled (a slot taken
at the claim, then a wait for a free concurrency slot, let sends granted 0.2 s apart arrive
together). A job refused a slot is handed
back in that same transaction (W3: ``pending`` due at its estimated slot, uncounted, no attempt
used) and its SMTP transaction is reset: nothing of it went out.

No slot leaks: a slot is only taken in the transaction that starts the send. The only slot
spent without a send is one taken for a job whose T4 guard then refuses (its lease was lost,
or it was cancelled meanwhile), or whose send fails between T4 and DATA: under-use, never a
send over the limit.

At the claim, nothing is taken; ``admit`` only keeps a worker from starting SMTP transactions
that would be refused (a refused claim has had MAIL and RCPT accepted, then RSET: a relay
counts that transaction like any other). Per limited key the worker keeps its own estimate of
the cell's TAT, the same GCRA arithmetic (``dispatch.rates.slot_after``): its own grants at T4
move it, and a refusal sets it from the due moment the database gave, for the key the
database names as the one that refused (``Refusal``; the keys before it in sorted order each
spent a slot, counted as grants at the refusal's moment). A claim goes on to its
T4 only if its slot, after those of the claims already waiting for theirs, has come; the rest
go back at once (W3), each due one interval after the last one handed back for that key, so
they come back one per slot rather than all together. With one worker on a key its claims are
never refused at T4 (measured: 200 sends at 50/s took 379 SMTP transactions and 775 claims
before, 200 and 352 now). Other workers' grants show only through refusals. These estimates
are the worker's own (its clock, its claims); the grant at T4 is the only authority.

A job under no limit costs nothing here: which campaigns have a limit is read at start, when
a claim brings a campaign not seen before, and every ``refresh_seconds``, never per job; its
T4 is the plain one. If that read fails, the limits last read stay in force, and a claim of a
campaign never read goes back (W3) for ``UNKNOWN_LIMIT_WAIT``: its limit is unknown, and a
limit is never skipped for want of a read (it was, before: such a claim went out unlimited).

A 421, 451 or 454 reply from a limited domain halves that domain's rate for a while
(``observe``). The slowdown and the refresh run in their own short transactions, not the
group commit's: a transaction that moves rate cells must take them in sorted order (so
PostgreSQL's row locks never wait in a cycle), and these would break that order. In the group
commit only ``SlotThenStart`` moves cells, all of its batch's in one sorted pass.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import re
import time
from collections import Counter
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

from dispatch import rates
from dispatch.committer import GroupCommitter
from dispatch.held_leases import HeldLeases
from dispatch.rate_requests import RateLimited, Slotted, SlotThenStart
from dispatch.rates import SLOWDOWN_CODES, campaign_key, domain_key, domain_of
from dispatch.store import ClaimedJob, Deferral, Lease
from dispatch.transport import Outcome
from dispatch.worker_report import WorkerReport

log = logging.getLogger("herald.worker")  # the worker's logger: these are the worker's events

# Seconds: the furthest a refusal moves a key's estimated slot (a clock far off the
# database's must not hold a key back for long; T4 would refuse again anyway).
_MAX_DRY = 60.0
# Seconds: how long a claim of a campaign whose limit could not be read goes back for. Its
# limit is unknown, so it is not sent until the limits are read (fail closed).
UNKNOWN_LIMIT_WAIT = 1.0


# A bare dot-atom address (no display name, comment, quoting or route): the common case, whose
# domain is read off directly; anything else goes through ``domain_of``'s RFC 5322 parser,
# which costs about twenty times more and would run for every job claimed.
_PLAIN_ADDRESS = re.compile(
    r"[A-Za-z0-9_+-]+(?:\.[A-Za-z0-9_+-]+)*"  # local part: dot-atom
    r"@([A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*)"  # domain: labels, no trailing dot
)


def recipient_domain(recipient: str) -> str:
    """``dispatch.rates.domain_of``, with a fast path for plain addresses (same result)."""
    plain = _PLAIN_ADDRESS.fullmatch(recipient)
    return plain.group(1).lower() if plain else domain_of(recipient)


class RateGate:
    def __init__(
        self,
        committer: GroupCommitter,
        leases: HeldLeases,
        report: WorkerReport,
        domain_rates: Mapping[str, float],
        *,
        refresh_seconds: float = 10.0,
    ) -> None:
        """``domain_rates``: per second, by lower-case domain (``parse_domain_rates``)."""
        self.committer = committer
        self.leases = leases
        self.report = report
        self.domain_rates = dict(domain_rates)
        self.refresh_seconds = refresh_seconds
        self._campaigns: set[str] = set()  # campaigns with a limit, as last read
        self._campaign_rates: dict[str, float] = {}  # their rates (per second), as last read
        # Claims admitted under a limit and not yet at T4, with the keys they will ask for.
        # By lease, not job id: an earlier claim of the same job may still be finishing.
        self._admitted: dict[Lease, tuple[str, ...]] = {}
        # Each limited key's TAT as this worker estimates it (monotonic seconds; GCRA, as
        # dispatch.rates): moved by its own grants at T4, and set from a refusal's due moment,
        # the database's word (other workers' grants show only so). Unknown: a full burst.
        self._tat: dict[str, float] = {}
        # Per key, when the last claim handed back is due (monotonic): the next goes after it.
        self._promised: dict[str, float] = {}
        # When the claims handed back and not yet claimed again are due (monotonic, a heap):
        # the worker claims again then, not a poll interval later (``next_due``).
        self._dues: list[float] = []
        self._seen: set[str] = set()  # campaigns whose limit (or none) was read
        self._read_at: float | None = None
        self._domains_written = False

    # ------------------------------------------------------------ at claim

    async def admit(self, jobs: list[ClaimedJob]) -> list[ClaimedJob]:
        """The ``jobs`` that may go on to their T4 (those under no limit, and those whose
        slot has come by this worker's estimate); the others are handed back at once (W3)
        until their slot is expected, or for ``UNKNOWN_LIMIT_WAIT`` when their campaign's
        limit could not be read. No slot is taken here: ``start`` takes it."""
        if not jobs:
            return jobs
        known = await self._refresh(jobs)
        self._forget_unheld()
        waiting = Counter(key for keys in self._admitted.values() for key in keys)
        now = time.monotonic()
        wall = datetime.now(UTC)
        deferrals: list[Deferral] = []
        for job in jobs:
            if not known and job.campaign not in self._seen:
                deferrals.append(Deferral(job.lease, wall + timedelta(seconds=UNKNOWN_LIMIT_WAIT)))
                heapq.heappush(self._dues, now + UNKNOWN_LIMIT_WAIT)
                continue
            keys = self.keys_of(job)
            if not keys:
                continue
            due = self._expected_slot(keys, waiting, now)
            if due is None:
                self._admitted[job.lease] = keys
                waiting.update(keys)
            else:
                deferrals.append(Deferral(job.lease, wall + timedelta(seconds=due)))
                self._promise(keys, now + due)
                heapq.heappush(self._dues, now + due)
        if not deferrals:
            return jobs
        await self._hand_back(deferrals)
        back = {d.lease[0] for d in deferrals}
        return [job for job in jobs if job.id not in back]

    def _expected_slot(
        self, keys: tuple[str, ...], waiting: Counter[str], now: float
    ) -> float | None:
        """None if a job with these keys may wait for its T4 now; else in how many seconds
        a slot is expected (this worker's estimate: the grant at T4 decides)."""
        later = 0.0
        for key in keys:
            rate = self._rate_of(key)
            # Its slot comes after those of the claims already waiting for their T4: a claim
            # let through before its slot would only be refused at T4, after an SMTP
            # transaction (MAIL, RCPT, RSET) the relay counts like any other. A claim handed
            # back is due one interval after the last one handed back, so that each comes
            # back to a slot of its own, not with the others of its claim.
            slot = rates.slot_after(self._tat.get(key), now, rate, waiting[key])
            if slot > now + rates.EPSILON:
                promised = self._promised.get(key)
                if promised is not None:
                    slot = max(slot, promised + 1.0 / rate)
                later = max(later, slot - now)
        return later or None

    def next_due(self) -> float | None:
        """When the soonest claim handed back by this worker, and not claimed since, is due
        (monotonic), if any."""
        return self._dues[0] if self._dues else None

    def claimed_at(self, moment: float) -> None:
        """A claim was asked at ``moment``: it took whatever was due by then."""
        while self._dues and self._dues[0] <= moment:
            heapq.heappop(self._dues)

    def _promise(self, keys: tuple[str, ...], at: float) -> None:
        """A claim with these keys was handed back until ``at`` (monotonic)."""
        for key in keys:
            self._promised[key] = max(self._promised.get(key, at), at)

    def _rate_of(self, key: str) -> float:
        kind, _, name = key.partition(":")
        table = self.domain_rates if kind == "domain" else self._campaign_rates
        return table.get(name) or 1.0  # a limit removed meanwhile: T4 will find no cell

    def _forget_unheld(self) -> None:
        """Stop counting claims that ended without reaching ``start`` (a safety net: the
        sender forgets each job when its send ends)."""
        for lease in [lease for lease in self._admitted if not self.leases.holds(lease)]:
            del self._admitted[lease]

    def forget(self, lease: Lease) -> None:
        """This claim no longer waits for its T4 (started, refused, or its send ended)."""
        self._admitted.pop(lease, None)

    def admitted_keys(self, lease: Lease) -> tuple[str, ...]:
        """The limited keys this claim must take a slot of at T4 (() for one under none)."""
        return self._admitted.get(lease, ())

    # ------------------------------------------------------------ at T4

    async def start(self, job: ClaimedJob, keys: tuple[str, ...]) -> Slotted:
        """T4 with the slots of ``keys`` taken in the same transaction (``SlotThenStart``).
        Raises if the commit failed: then neither or both happened (one transaction)."""
        slotted = await self.committer.submit(SlotThenStart(job.lease, keys))
        self.forget(job.lease)
        now = time.monotonic()
        if slotted.started is not None:
            self._granted(keys, slotted.started, now)
        if slotted.due is not None:
            self.handed_back(job)
            wait = min(max((slotted.due - datetime.now(UTC)).total_seconds(), 0.0), _MAX_DRY)
            heapq.heappush(self._dues, now + wait)
            refused_by = _refusing_key(slotted, keys)
            if refused_by is not None:
                # The keys visited before it (in sorted order, as the cells are) each gave a
                # slot, spent unused, in the refusal's transaction.
                spent = tuple(k for k in keys if k < refused_by)
                if spent and slotted.refusal is not None:
                    self._granted(spent, slotted.refusal.at, now)
                self._tat[refused_by] = now + wait + rates.tolerance(self._rate_of(refused_by))
                self._promise((refused_by,), now + wait)
        return slotted

    def _granted(self, keys: tuple[str, ...], moment: datetime, now: float) -> None:
        """Slots of ``keys`` were taken at ``moment`` (the database's clock): the estimate
        counts from the grant's own moment, not this later one, since an estimate running
        ahead of the cell would send claims back that are due."""
        ago = (datetime.now(UTC) - moment).total_seconds()
        at = now - min(max(ago, 0.0), _MAX_DRY)
        for key in keys:
            self._tat[key] = rates.granted(self._tat.get(key), at, self._rate_of(key))

    def handed_back(self, job: ClaimedJob) -> None:
        """``job`` was refused a slot at T4 and is pending again (W3 committed with its token):
        no longer held, and counted. Also for a T4 whose commit failed and whose re-read
        found the job handed back (dispatch.job_send), so the report says the same either way."""
        self.forget(job.lease)
        self.leases.drop(job.lease)
        self.report.rate_limited += 1

    def keys_of(self, job: ClaimedJob) -> tuple[str, ...]:
        keys: list[str] = []
        if job.campaign in self._campaigns:
            keys.append(campaign_key(job.campaign))
        if job.channel == "email" and self.domain_rates:
            domain = recipient_domain(job.recipient)
            if domain in self.domain_rates:
                keys.append(domain_key(domain))
        return tuple(keys)

    async def _hand_back(self, deferrals: list[Deferral]) -> None:
        for deferral in deferrals:
            self.leases.drop(deferral.lease)
        try:
            handed = await self.committer.submit(RateLimited(tuple(deferrals)))
        except Exception as exc:
            log.warning(
                "handing back %d rate-limited claims failed: %s",
                len(deferrals),
                exc,
                extra={"event": "rate_hand_back_failed", "count": len(deferrals)},
            )
            return  # never sent by this worker: the claims lapse and recovery gives them back (R1)
        self.report.rate_limited += len(handed)

    # ------------------------------------------------------------ which campaigns are limited

    async def prime(self) -> None:
        """Write this worker's domain limits and read the campaigns' (the worker runs it beside
        its first claim, whose admission waits for it): the first claim's admission then waits
        for a read at most, not for a new connection and the writes."""
        await self._refresh([])

    async def _refresh(self, jobs: list[ClaimedJob]) -> bool:
        """Read which campaigns have a limit when due; False if the read failed (then the
        last known limits stay, and a campaign never read has an unknown limit)."""
        now = time.monotonic()
        fresh = self._read_at is not None and now - self._read_at < self.refresh_seconds
        if fresh and all(job.campaign in self._seen for job in jobs):
            return True
        try:
            limited = await asyncio.to_thread(self._read_limits)
        except Exception as exc:
            log.warning("reading rate limits failed: %s", exc, extra={"event": "rate_read_failed"})
            return False
        self._campaign_rates = {
            key.removeprefix("campaign:"): rate for key, rate in limited.items()
        }
        self._campaigns = set(self._campaign_rates)
        self._seen = self._campaigns | {job.campaign for job in jobs}
        self._read_at = now
        return True

    def _read_limits(self) -> dict[str, float]:
        """One short transaction: write this worker's domain limits (the first time), read
        which campaigns have one."""
        store = self.committer.store
        with self.committer.engine.begin() as conn:
            if not self._domains_written:
                limits: dict[str, float | None] = {
                    domain_key(domain): rate for domain, rate in self.domain_rates.items()
                }
                store.set_rates(conn, limits)
                self._domains_written = True
            return store.rate_limits(conn, "campaign:")

    # ------------------------------------------------------------ after a reply

    async def observe(self, job: ClaimedJob, outcome: Outcome) -> None:
        """A 421/451/454 from a limited domain slows that domain down (only that one)."""
        if outcome.code not in SLOWDOWN_CODES or job.channel != "email":
            return
        domain = recipient_domain(job.recipient)
        if domain not in self.domain_rates:
            return
        try:
            factor = await asyncio.to_thread(self._slow_down, domain_key(domain))
        except Exception as exc:
            log.warning(
                "slowing down %s failed: %s",
                domain,
                exc,
                extra={"event": "slow_down_failed", "domain": domain},
            )
            return
        if factor is not None:
            log.info(
                "%s answered %s: its rate is slowed to %.3g/s for a while",
                domain,
                outcome.code,
                self.domain_rates[domain] * factor,
                extra={
                    "event": "rate_slowed",
                    "domain": domain,
                    "code": outcome.code,
                    "rate": self.domain_rates[domain] * factor,
                },
            )

    def _slow_down(self, key: str) -> float | None:
        with self.committer.engine.begin() as conn:
            return self.committer.store.slow_down(conn, key)


def _refusing_key(slotted: Slotted, keys: tuple[str, ...]) -> str | None:
    """Which of ``keys`` refused the slot: the cells name it (``Slotted.refusal``); without a
    name, only a single key is certain (a guess among several could hold back claims that are
    due)."""
    if slotted.refusal is not None and slotted.refusal.key in keys:
        return slotted.refusal.key
    return keys[0] if len(keys) == 1 else None
