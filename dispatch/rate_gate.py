"""W3 in the worker: claims without a slot of their rate limits are handed back, uncounted.

The limits (``dispatch.rates``) are shared by every worker through the ``rate_limit`` table: a
campaign's (``rate: 50/s`` in its file, written there at launch) and its recipient domain's
(the defaults, or ``HERALD_DOMAIN_RATES``; each worker writes its own at start, so the workers
of one deployment must share the setting). Right after a claim, the jobs that fall under a
limit ask for a slot; those refused go back to ``pending`` due at their estimated slot (W3),
in the same transaction, and the worker sends the rest, so it keeps busy on other domains.

A job under no limit costs nothing here: which campaigns have a limit is read at start, when
a claim brings a campaign not seen before, and every ``refresh_seconds``, never per job.

A 421, 451 or 454 reply from a limited domain halves that domain's rate for a while
(``observe``). The slowdown and the refresh run in their own short transactions, not the
group commit's: a transaction that moves rate cells must take them in sorted order (so
PostgreSQL's row locks never wait in a cycle), and these would break that order.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import ClassVar, Self

import sqlalchemy as sa

from dispatch.commit_requests import CommitContext, OutboxRequest, Release
from dispatch.committer import GroupCommitter
from dispatch.held_leases import HeldLeases
from dispatch.rates import SLOWDOWN_CODES, campaign_key, domain_key, domain_of
from dispatch.store import ClaimedJob, Deferral, SlotAsk
from dispatch.transport import Outcome
from dispatch.worker_report import WorkerReport

log = logging.getLogger("herald.worker")  # the worker's logger: these are the worker's events


@dataclass(frozen=True)
class Throttle(OutboxRequest[dict[int, datetime]]):
    """Take the slots these claims need; hand back (W3) those refused, due at their slot.
    Returns the refused ids of this request and when they are due."""

    asks: tuple[SlotAsk, ...]
    kind: ClassVar[str] = "throttle"
    order: ClassVar[int] = 11  # after the claim: it is about claims already made

    @classmethod
    def apply(
        cls, ctx: CommitContext, conn: sa.Connection, batch: Sequence[Self]
    ) -> list[dict[int, datetime]]:
        asks = [ask for r in batch for ask in r.asks]
        refused = ctx.store.acquire_slots(conn, asks)
        deferrals = [Deferral(lease, refused[lease[0]]) for lease in _leases(asks, refused)]
        ctx.store.rate_limited_claims(conn, deferrals, actor=ctx.owner)
        return [
            {a.lease[0]: refused[a.lease[0]] for a in r.asks if a.lease[0] in refused}
            for r in batch
        ]


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


def _leases(asks: Sequence[SlotAsk], refused: Mapping[int, datetime]) -> list[tuple[int, int]]:
    return [ask.lease for ask in asks if ask.lease[0] in refused]


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
        self._seen: set[str] = set()  # campaigns whose limit (or none) was read
        self._read_at: float | None = None
        self._domains_written = False

    # ------------------------------------------------------------ at claim

    async def admit(self, jobs: list[ClaimedJob]) -> list[ClaimedJob]:
        """The ``jobs`` that got every slot they need (or need none); the others are handed
        back until their slot (W3)."""
        if not jobs:
            return jobs
        await self._refresh(jobs)
        asks = [SlotAsk(job.lease, keys) for job in jobs if (keys := self.keys_of(job))]
        if not asks:
            return jobs  # the fast path: no limit applies, no statement
        try:
            refused = await self.committer.submit(Throttle(tuple(asks)))
        except Exception as exc:
            # Unknown whether the slots were taken: send none of these now. W1 gives back
            # what is still ours (the claim uncounted); the rest was handed back already.
            log.warning(
                "rate limit check failed for %d claims: %s",
                len(asks),
                exc,
                extra={"event": "rate_check_failed", "count": len(asks)},
            )
            await self._release([ask.lease for ask in asks])
            asked = {ask.lease[0] for ask in asks}
            return [job for job in jobs if job.id not in asked]
        for job_id in refused:
            self.leases.drop(job_id)
        self.report.rate_limited += len(refused)
        return [job for job in jobs if job.id not in refused]

    def keys_of(self, job: ClaimedJob) -> tuple[str, ...]:
        keys: list[str] = []
        if job.campaign in self._campaigns:
            keys.append(campaign_key(job.campaign))
        if job.channel == "email" and self.domain_rates:
            domain = recipient_domain(job.recipient)
            if domain in self.domain_rates:
                keys.append(domain_key(domain))
        return tuple(keys)

    async def _release(self, leases: list[tuple[int, int]]) -> None:
        for job_id, _ in leases:
            self.leases.drop(job_id)
        try:
            released = await self.committer.submit(Release(tuple(leases)))
        except Exception:
            return  # the claims lapse and recovery gives them back (R1)
        self.report.released += len(released)

    # ------------------------------------------------------------ which campaigns are limited

    async def _refresh(self, jobs: list[ClaimedJob]) -> None:
        now = time.monotonic()
        fresh = self._read_at is not None and now - self._read_at < self.refresh_seconds
        if fresh and all(job.campaign in self._seen for job in jobs):
            return
        try:
            limited = await asyncio.to_thread(self._read_limits)
        except Exception as exc:
            # Keep the last known limits (none at first: then domain limits still apply).
            log.warning("reading rate limits failed: %s", exc, extra={"event": "rate_read_failed"})
            return
        self._campaigns = {key.removeprefix("campaign:") for key in limited}
        self._seen = self._campaigns | {job.campaign for job in jobs}
        self._read_at = now

    def _read_limits(self) -> set[str]:
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
            return set(store.rate_limits(conn, "campaign:"))

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
