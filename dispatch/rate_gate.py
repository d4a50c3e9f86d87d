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
that would be refused: per limited key it lets at most a burst's worth of its claims wait for
T4, and after a refusal it knows the key is dry until the refused job's slot. The rest go back
at once (W3), due when a slot is expected. These estimates are the worker's own (its clock, its
claims); the grant at T4 is the only authority.

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
import logging
import re
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import ClassVar, NamedTuple, Self

import sqlalchemy as sa

from dispatch.commit_requests import CommitContext, OutboxRequest
from dispatch.committer import GroupCommitter
from dispatch.held_leases import HeldLeases
from dispatch.rates import SLOWDOWN_CODES, burst, campaign_key, domain_key, domain_of
from dispatch.store import ClaimedJob, Deferral, Lease, SlotAsk
from dispatch.transport import Outcome
from dispatch.worker_report import WorkerReport

log = logging.getLogger("herald.worker")  # the worker's logger: these are the worker's events

# Seconds: the longest a refusal keeps a key dry in the worker's estimate (a clock far off the
# database's must not hold a key back for long; T4 would refuse again anyway).
_MAX_DRY = 60.0
# Seconds: how long a claim of a campaign whose limit could not be read goes back for. Its
# limit is unknown, so it is not sent until the limits are read (fail closed).
UNKNOWN_LIMIT_WAIT = 1.0


class Slotted(NamedTuple):
    """What ``SlotThenStart`` did for one job: ``started`` is T4's moment (the job may go out);
    ``due`` says it got no slot and was handed back (W3) until then; both None: its T4 guard
    refused (the lease is no longer ours, or the job was cancelled: settle it)."""

    started: datetime | None
    due: datetime | None


@dataclass(slots=True)
class SlotThenStart(OutboxRequest[Slotted]):
    """T4 for a job under rate limits: take a slot of each of ``keys``, then T4 in the same
    transaction; a job refused a slot is handed back (W3) instead, due at its slot."""

    lease: Lease
    keys: tuple[str, ...]
    kind: ClassVar[str] = "t4_slot"
    order: ClassVar[int] = 1  # with the plain T4s: after the outcomes, before the claims
    urgent: ClassVar[bool] = True  # like a plain T4: its send holds a slot meanwhile

    @classmethod
    def apply(cls, ctx: CommitContext, conn: sa.Connection, batch: Sequence[Self]) -> list[Slotted]:
        refused = ctx.store.acquire_slots(conn, [SlotAsk(r.lease, r.keys) for r in batch])
        handed: set[int] = set()
        if refused:
            deferrals = [
                Deferral(r.lease, refused[r.lease[0]]) for r in batch if r.lease[0] in refused
            ]
            handed = ctx.store.rate_limited_claims(conn, deferrals, actor=ctx.owner)
        granted = [r.lease for r in batch if r.lease[0] not in refused]
        started: dict[int, datetime] = {}
        if granted:
            started = ctx.store.start_sends(
                conn, granted, margin_seconds=ctx.t4_margin_seconds, actor=ctx.owner
            )
            if started:
                ctx.instrumentation.before_t4_commit([g for g in granted if g[0] in started])
        return [
            Slotted(started.get(r.lease[0]), refused[r.lease[0]] if r.lease[0] in handed else None)
            for r in batch
        ]


@dataclass(slots=True)
class RateLimited(OutboxRequest[set[int]]):
    """W3 without a slot asked: claims the worker expects no slot for soon (``admit``); the
    ids handed back (the batch's whole set, to each)."""

    deferrals: tuple[Deferral, ...]
    kind: ClassVar[str] = "rate_limited"
    order: ClassVar[int] = 11  # after the claim: it is about claims already made

    @classmethod
    def apply(
        cls, ctx: CommitContext, conn: sa.Connection, batch: Sequence[Self]
    ) -> list[set[int]]:
        deferrals = [d for r in batch for d in r.deferrals]
        handed = ctx.store.rate_limited_claims(conn, deferrals, actor=ctx.owner)
        return [handed for _ in batch]


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
        # Monotonic time until which a key is known to have no slot (learned from a refusal).
        self._dry_until: dict[str, float] = {}
        self._seen: set[str] = set()  # campaigns whose limit (or none) was read
        self._read_at: float | None = None
        self._domains_written = False

    # ------------------------------------------------------------ at claim

    async def admit(self, jobs: list[ClaimedJob]) -> list[ClaimedJob]:
        """The ``jobs`` that may go on to their T4 (those under no limit, and a burst's worth
        per limited key); the others are handed back at once (W3) until a slot is expected,
        or for ``UNKNOWN_LIMIT_WAIT`` when their campaign's limit could not be read.
        No slot is taken here: ``start`` takes it."""
        if not jobs:
            return jobs
        known = await self._refresh(jobs)
        self._forget_unheld()
        waiting = Counter(key for keys in self._admitted.values() for key in keys)
        now = time.monotonic()
        wall = datetime.now(UTC)
        behind: Counter[str] = Counter()  # handed back in this batch, per key
        deferrals: list[Deferral] = []
        for job in jobs:
            if not known and job.campaign not in self._seen:
                deferrals.append(Deferral(job.lease, wall + timedelta(seconds=UNKNOWN_LIMIT_WAIT)))
                continue
            keys = self.keys_of(job)
            if not keys:
                continue
            due = self._expected_slot(keys, waiting, behind, now)
            if due is None:
                self._admitted[job.lease] = keys
                waiting.update(keys)
            else:
                deferrals.append(Deferral(job.lease, wall + timedelta(seconds=due)))
                behind.update(keys)
        if not deferrals:
            return jobs
        await self._hand_back(deferrals)
        back = {d.lease[0] for d in deferrals}
        return [job for job in jobs if job.id not in back]

    def _expected_slot(
        self, keys: tuple[str, ...], waiting: Counter[str], behind: Counter[str], now: float
    ) -> float | None:
        """None if a job with these keys may wait for its T4 now; else in how many seconds
        a slot is expected (this worker's estimate: the grant at T4 decides)."""
        later = 0.0
        for key in keys:
            interval = 1.0 / self._rate_of(key)
            dry = self._dry_until.get(key, 0.0) - now
            if dry > 0:
                later = max(later, dry + behind[key] * interval)
            elif waiting[key] >= burst(self._rate_of(key)):
                later = max(later, (behind[key] + 1) * interval)
        return later or None

    def _rate_of(self, key: str) -> float:
        kind, _, name = key.partition(":")
        rates = self.domain_rates if kind == "domain" else self._campaign_rates
        return rates.get(name) or 1.0  # a limit removed meanwhile: T4 will find no cell

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
        if slotted.due is not None:
            self.handed_back(job)
            if len(keys) == 1:  # which key refused is certain only then
                wait = (slotted.due - datetime.now(UTC)).total_seconds()
                self._dry_until[keys[0]] = time.monotonic() + min(max(wait, 0.0), _MAX_DRY)
        return slotted

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
        """Write this worker's domain limits and read the campaigns' before the first claim
        (the worker runs it beside its first recovery pass): the first claim's admission then
        waits for a read at most, not for a new connection and the writes."""
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
