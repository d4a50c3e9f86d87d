"""The jobs a worker holds a lease on, and until when each lease surely lasts.

Deadlines are on the monotonic clock and err early: a lease counts from when the claim or
heartbeat was *sent*, so the database's own expiry is never before the local one.
"""

from __future__ import annotations

from collections.abc import Iterable

from dispatch.store import ClaimedJob, Lease


class HeldLeases:
    def __init__(self, lease_seconds: float) -> None:
        self.lease_seconds = lease_seconds
        self.jobs: dict[int, ClaimedJob] = {}  # jobs we hold a lease on
        self.deadlines: dict[int, float] = {}  # monotonic time the lease surely lasts to

    def hold(self, jobs: Iterable[ClaimedJob], now: float) -> None:
        """Start tracking freshly claimed ``jobs``, claimed at monotonic time ``now``."""
        for job in jobs:
            self.jobs[job.id] = job
            self.deadlines[job.id] = now + self.lease_seconds

    def drop(self, job_id: int) -> None:
        """Stop tracking a job: it was handed back, or its send is over."""
        self.jobs.pop(job_id, None)
        self.deadlines.pop(job_id, None)

    def deadline(self, job_id: int) -> float:
        """When the lease surely lasts to; 0.0 (long past) for a job not held."""
        return self.deadlines.get(job_id, 0.0)

    def leases(self) -> list[Lease]:
        return [job.lease for job in self.jobs.values()]

    def renew(self, leases: Iterable[Lease], alive: set[int], sent_at: float) -> None:
        """Apply a heartbeat for ``leases`` sent at ``sent_at`` that kept ``alive`` alive."""
        for job_id, _ in leases:
            if job_id in alive:
                self.deadlines[job_id] = sent_at + self.lease_seconds
            elif job_id in self.jobs:
                # Not revived: the job may already belong to someone else. Our later
                # writes will match nothing; stop trusting the local deadline now.
                self.deadlines[job_id] = 0.0
