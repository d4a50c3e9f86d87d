"""The worker's typed view of the outbox: one method per request, each a group-committed write.

Every call becomes one request in the committer's next transaction and returns once that
transaction has committed (or raises if it failed: the commit's outcome is then unknown, and
the caller decides what that means). The types carry a job's lease from ``claim`` through
``start_send`` to ``complete``, so the type checker follows the fencing token the whole way.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from dispatch.commit_requests import (
    Claim,
    Complete,
    Defer,
    HasWork,
    Heartbeat,
    LeaseState,
    NextDueIn,
    Recover,
    Release,
    Settle,
    StartSend,
)
from dispatch.committer import GroupCommitter
from dispatch.relay_requests import RelayHandBack, RelayReport
from dispatch.states import State
from dispatch.store import ClaimedJob, Completion, Deferral, Lease, LeaseRow, RecoveryReport


class OutboxClient:
    def __init__(self, committer: GroupCommitter) -> None:
        self._committer = committer

    async def claim(self, limit: int) -> list[ClaimedJob]:
        """Lease up to ``limit`` due jobs, each with a fresh fencing token."""
        return await self._committer.submit(Claim(limit))

    async def start_send(self, lease: Lease) -> datetime | None:
        """T4. Once the transition is committed, the moment it happened (the message's Date):
        the send may go out. None: refused."""
        return await self._committer.submit(StartSend(lease))

    async def complete(self, completion: Completion) -> bool:
        """Record an outcome; True if it applied (False: the lease is no longer ours)."""
        return await self._committer.submit(Complete(completion))

    async def settle(self, lease: Lease) -> State | None:
        """T4 was refused: where the job went instead (None: the lease is no longer ours)."""
        return await self._committer.submit(Settle(lease))

    async def heartbeat(self, leases: Sequence[Lease]) -> set[int]:
        """Extend these leases; the ids whose lease is still ours."""
        return await self._committer.submit(Heartbeat(tuple(leases)))

    async def release(self, leases: Sequence[Lease]) -> set[int]:
        """Give unstarted claims back untried; the ids released."""
        return await self._committer.submit(Release(tuple(leases)))

    async def defer(self, deferrals: Sequence[Deferral]) -> set[int]:
        """Hand back claims whose send window is closed (W2); the ids handed back."""
        return await self._committer.submit(Defer(tuple(deferrals)))

    async def relay_hand_back(
        self, leases: Sequence[Lease], *, retry_in: float, why: str
    ) -> set[int]:
        """W4: give back claims that could not reach the relay, due in ``retry_in`` seconds."""
        return await self._committer.submit(RelayHandBack(tuple(leases), retry_in, why))

    async def report_relay(self, relay: str, *, reachable: bool, error: str | None = None) -> bool:
        """Record the relay unreachable (or ok again) in ``relay_status``."""
        return await self._committer.submit(RelayReport(relay, reachable, error))

    async def lease_state(self, lease: Lease) -> LeaseRow | None:
        """The job's state and ``send_started_at`` while it carries this lease's token, else
        None."""
        return await self._committer.submit(LeaseState(lease))

    async def recover(self, grace_seconds: float) -> RecoveryReport:
        """One recovery pass over every expired lease (anyone's)."""
        return await self._committer.submit(Recover(grace_seconds))

    async def has_work(self, horizon_seconds: float) -> bool:
        """Anything running, or due within ``horizon_seconds``?"""
        return await self._committer.submit(HasWork(horizon_seconds))

    async def next_due_in(self) -> float | None:
        """Seconds until the next pending job is due; None when nothing is pending."""
        return await self._committer.submit(NextDueIn())
