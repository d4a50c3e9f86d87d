"""How many jobs a queue held at once during a drain, read afterwards from its own journal.

A drain of no-op jobs is limited mostly by how many jobs a queue keeps between its claim and its
completion: the more it holds, the larger its batches and the fewer its round trips. Two queues'
rates compare fairly only when they hold about as many, so the drain section reports this figure
for every contender whose journal records both moments: Herald's ``send_event`` (a claim, T2, to
the job's leaving ``claimed``/``sending``) and pgqueuer's ``pgqueuer_log`` (``picked`` to its
final status). It is read after the clock stops, so it costs the measured run nothing.

Each journal row carries its transaction's start time (``now()``), so rows of one transaction
tie; a job leaving and another arriving at the same instant are counted leaving first.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

# (moment, +1 when a job is taken, -1 when it is let go)
HERALD_EVENTS = """
SELECT at, CASE WHEN to_state = 'claimed' THEN 1 ELSE -1 END
FROM send_event
WHERE to_state = 'claimed'
   OR (from_state IN ('claimed', 'sending') AND to_state NOT IN ('claimed', 'sending'))
"""

PGQUEUER_EVENTS = """
SELECT created, CASE WHEN status = 'picked' THEN 1 ELSE -1 END
FROM pgqueuer_log
WHERE status IN ('picked', 'successful', 'exception', 'canceled', 'failed', 'deleted')
"""


def most_at_once(events: Iterable[tuple[Any, int]]) -> int:
    """The largest number of jobs held at any moment, from (moment, +1/-1) events."""
    held = most = 0
    for _, change in sorted(events, key=lambda event: (event[0], event[1])):
        held += change
        most = max(most, held)
    return most
