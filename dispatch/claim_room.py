"""How many jobs the dispatch loop asks for in its next claim (pure: no clock, no I/O).

A worker holds at most its prefetch, twice its concurrency: the backlog (claimed, not started),
the sends on the wire, and the sends settling (off the wire, their outcome being committed).
One claim asks for at most a wave (the concurrency), so the first claim of a drain is half the
prefetch and its sends start while the next one runs.

While the backlog still feeds the wire, the loop waits for room for half a wave. Once the
backlog is empty, a smaller claim fills the slots sooner than waiting for the sends settling to
commit (the claim runs beside their transaction), but not one for less than an eighth of a
wave: a claim is a transaction on the dispatch loop's path, and the loop makes one at a time, so
a claim of one job takes about as long as a claim of five hundred and the next claim waits
behind it. In a drain, one send of a wave ending a turn ahead of the others left room for one
job while the wave's other outcomes committed; claiming it made every third claim a claim of
one from then on (bench/profiles/drain-cpu.md, session 33). At a relay's pace (concurrency 50),
the small claims that keep the wire full were for 11–24 jobs.

Waiting never leaves the wire waiting for nothing: with less than half a wave of room, the
backlog and the sends hold more than one and a half waves; at most one wave is on the wire, so
more than half a wave is in the backlog, which feeds the wire as slots free, or settling, and
every send that ends wakes the loop.
"""

from __future__ import annotations


def claim_size(*, concurrency: int, backlog: int, inflight: int) -> int:
    """Jobs to claim now (0: none). ``inflight`` counts every send task, on the wire or
    settling."""
    room = 2 * concurrency - backlog - inflight
    if room <= 0:
        return 0
    if room >= concurrency // 2:
        return min(room, concurrency)
    if not backlog and room >= max(1, concurrency // 8):
        return room
    return 0
