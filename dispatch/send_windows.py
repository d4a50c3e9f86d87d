"""The worker's side of send windows: may this claimed job go out now, and if not, when?

The scheduler places a job's first ``not_before`` at its window's next opening, but a job can
still reach a worker outside its window: a retry's backoff, a claim that waited in the
worker's backlog, a worker that was down while the window was open. The worker therefore
re-checks the stored window (``send_job.send_window``) with its own clock and hands a job
outside it back until it opens (W2, ``dispatch.outbox.send.SendOps.defer_claims``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from datetime import datetime
from functools import lru_cache

from dispatch.outbox.jobs import ClaimedJob, Deferral
from dispatch.wallclock import SendWindow


class UnreadableWindow(ValueError):
    """A stored send window this worker cannot read (corrupt, or a zone its tzdata lacks)."""


@lru_cache(maxsize=256)  # the jobs of one campaign (and zone) share one window
def parse_window(text: str) -> SendWindow:
    try:
        return SendWindow.from_json(text)
    except (ValueError, KeyError, TypeError) as exc:
        raise UnreadableWindow(f"unreadable send window {text!r}: {exc}") from None


def closed_until(send_window: str | None, now: datetime) -> datetime | None:
    """None when a job with this stored window may go out at ``now`` (an aware datetime);
    otherwise the moment the window next opens. Raises UnreadableWindow."""
    if send_window is None:
        return None
    window = parse_window(send_window)
    if window.contains(now):
        return None
    return window.next_opening(now)


def outside_their_window(jobs: Iterable[ClaimedJob], now: datetime) -> list[Deferral]:
    """A deferral to its window's next opening for each job whose window is closed at ``now``.

    A job whose window cannot be read is not deferred: the worker fails it when it starts the
    send, with the reason.
    """
    deferrals = []
    for job in jobs:
        with contextlib.suppress(UnreadableWindow):
            opens = closed_until(job.send_window, now)
            if opens is not None:
                deferrals.append(Deferral(job.lease, opens))
    return deferrals
