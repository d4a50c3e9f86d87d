"""The jobs a worker holds a lease on, and until when each lease surely lasts.

Deadlines are on the monotonic clock and err early: a lease counts from when the claim or
heartbeat was *sent*, so the database's own expiry is never before the local one.

Everything here is asked by lease (job id AND fencing token), never by job id alone: a job
handed back (W1-W4) can be claimed again by this worker while the task of its earlier claim is
still finishing (resetting its SMTP transaction, say). That task's clean-up must not drop the
new claim's lease, nor a heartbeat that found the old claim gone end the new one: the new claim
would lose its heartbeats, and its send its rate-limit keys and concurrency slot.
"""

from __future__ import annotations

from collections.abc import Iterable

from dispatch.store import ClaimedJob, Lease


class HeldLeases:
    def __init__(self, lease_seconds: float) -> None:
        self.lease_seconds = lease_seconds
        self.jobs: dict[int, ClaimedJob] = {}  # jobs we hold a lease on: their newest claim
        self.deadlines: dict[int, float] = {}  # monotonic time the lease surely lasts to

    def hold(self, jobs: Iterable[ClaimedJob], now: float) -> None:
        """Start tracking freshly claimed ``jobs``, claimed at monotonic time ``now``."""
        for job in jobs:
            self.jobs[job.id] = job
            self.deadlines[job.id] = now + self.lease_seconds

    def holds(self, lease: Lease) -> bool:
        """Whether ``lease`` is the claim held on its job (not an earlier or later one)."""
        job = self.jobs.get(lease[0])
        return job is not None and job.token == lease[1]

    def drop(self, lease: Lease) -> None:
        """Stop tracking a claim: it was handed back, or its send is over. A newer claim of the
        same job is kept."""
        if self.holds(lease):
            del self.jobs[lease[0]]
            self.deadlines.pop(lease[0], None)

    def deadline(self, lease: Lease) -> float:
        """When ``lease`` surely lasts to; 0.0 (long past) for a claim not held."""
        return self.deadlines.get(lease[0], 0.0) if self.holds(lease) else 0.0

    def leases(self) -> list[Lease]:
        return [job.lease for job in self.jobs.values()]

    def renew(self, leases: Iterable[Lease], alive: set[int], sent_at: float) -> None:
        """Apply a heartbeat for ``leases`` sent at ``sent_at`` that kept ``alive`` (job ids)
        alive. A lease no longer held (its send ended, or the job was claimed again meanwhile)
        is left alone."""
        for lease in leases:
            if not self.holds(lease):
                continue
            if lease[0] in alive:
                self.deadlines[lease[0]] = sent_at + self.lease_seconds
            else:
                # Not revived: the job may already belong to someone else. Our later
                # writes will match nothing; stop trusting the local deadline now.
                self.deadlines[lease[0]] = 0.0
