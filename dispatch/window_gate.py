"""W2 in the worker: claims whose send window is closed are handed back, uncounted.

A job's window (``dispatch.send_windows``) is checked on the worker's clock when it is claimed
and again when its send starts; either way it goes back to ``pending`` until the window opens.
"""

from __future__ import annotations

import logging
from datetime import datetime

from dispatch.held_leases import HeldLeases
from dispatch.outbox_client import OutboxClient
from dispatch.send_windows import outside_their_window
from dispatch.store import ClaimedJob, Deferral
from dispatch.worker_report import WorkerReport

log = logging.getLogger("herald.worker")  # the worker's logger: these are the worker's events


class WindowGate:
    def __init__(self, outbox: OutboxClient, leases: HeldLeases, report: WorkerReport) -> None:
        self.outbox = outbox
        self.leases = leases
        self.report = report

    async def admit(self, jobs: list[ClaimedJob], now: datetime) -> list[ClaimedJob]:
        """The ``jobs`` whose window is open at ``now``; the others are handed back."""
        deferrals = outside_their_window(jobs, now)
        if deferrals:
            await self.hand_back(deferrals)
        deferred = {d.lease[0] for d in deferrals}
        return [job for job in jobs if job.id not in deferred]

    async def hand_back(self, deferrals: list[Deferral]) -> None:
        """W2 for these claims. They are never sent by this worker, whatever the outcome: if
        the write fails, the claims lapse and recovery gives them back (R1)."""
        for deferral in deferrals:
            self.leases.drop(deferral.lease)
        try:
            deferred = await self.outbox.defer(deferrals)
        except Exception as exc:
            log.warning(
                "handing back %d claims outside their window failed: %s",
                len(deferrals),
                exc,
                extra={"event": "hand_back_failed", "count": len(deferrals)},
            )
            return
        self.report.outside_window += len(deferred)
