"""The size of the dispatch loop's next claim (``dispatch.claim_room``): a wave at most, half a
wave while the backlog feeds the wire, and never less than an eighth of a wave. A claim is a
transaction on the loop's path, as long for one job as for hundreds; a drain whose claims asked
for the one job of room a straggling send left made every third claim a claim of one."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from dispatch.claim_room import claim_size


@dataclass(frozen=True)
class Held:
    """What a worker holds: at most ``concurrency`` sends on the wire, everything within the
    prefetch (twice the concurrency)."""

    concurrency: int
    backlog: int
    on_wire: int
    settling: int

    @property
    def room(self) -> int:
        return 2 * self.concurrency - self.backlog - self.on_wire - self.settling

    @property
    def claim(self) -> int:
        return size(self.concurrency, self.backlog, self.on_wire + self.settling)


@st.composite
def held(draw: st.DrawFn) -> Held:
    concurrency = draw(st.integers(1, 600))
    on_wire = draw(st.integers(0, concurrency))
    settling = draw(st.integers(0, 2 * concurrency - on_wire))
    backlog = draw(st.integers(0, 2 * concurrency - on_wire - settling))
    return Held(concurrency, backlog, on_wire, settling)


def size(concurrency: int, backlog: int, inflight: int) -> int:
    return claim_size(concurrency=concurrency, backlog=backlog, inflight=inflight)


def test_one_job_of_room_beside_a_full_wire_and_a_settling_wave_is_not_claimed() -> None:
    # The drain's state before every claim of one (session 33): a wave on the wire, the last
    # wave's 499 outcomes committing, its straggler done. The old rule claimed that one job.
    assert size(500, backlog=0, inflight=999) == 0
    # Once those outcomes have committed, the straggler's room and theirs go in one claim.
    assert size(500, backlog=0, inflight=500) == 500


def test_the_first_claim_of_a_drain_is_a_wave_and_the_next_fills_the_prefetch() -> None:
    assert size(500, backlog=0, inflight=0) == 500
    assert size(500, backlog=500, inflight=0) == 500
    assert size(500, backlog=0, inflight=1000) == 0


def test_at_a_relays_pace_an_empty_backlog_takes_a_small_claim_but_not_a_tiny_one() -> None:
    assert size(50, backlog=0, inflight=85) == 15  # 50 on the wire, 35 settling
    assert size(50, backlog=3, inflight=85) == 0  # the backlog feeds the wire meanwhile
    assert size(50, backlog=0, inflight=97) == 0  # 3 jobs: the settling 47 will make room


def test_small_concurrencies_claim_whatever_room_there_is() -> None:
    assert size(1, backlog=0, inflight=1) == 1
    assert size(2, backlog=1, inflight=2) == 1
    assert size(7, backlog=0, inflight=13) == 1


@given(held())
def test_a_claim_fits_the_room_and_a_wave_and_is_never_tiny(h: Held) -> None:
    assert h.claim == 0 or max(1, h.concurrency // 8) <= h.claim == min(h.room, h.concurrency)


@given(held())
def test_when_a_claim_is_made(h: Held) -> None:
    if h.room > 0 and h.room >= h.concurrency // 2:
        assert h.claim == min(h.room, h.concurrency)  # half a wave of room: always
    elif h.backlog:
        assert h.claim == 0  # the backlog feeds the wire until there is room for half a wave
    elif h.room >= max(1, h.concurrency // 8):
        assert h.claim == h.room  # the wire would wait: a small claim, beside the settling commit
    else:
        assert h.claim == 0


@given(held())
def test_the_loop_waits_only_while_more_than_half_a_wave_will_come_back(h: Held) -> None:
    # Not claiming never leaves the wire waiting for nothing: the backlog feeds it, and the
    # sends settling (and the backlog's, once sent) give their room back as they end, each
    # waking the loop.
    if h.room > 0 and h.claim == 0:
        assert h.backlog + h.settling > h.concurrency // 2
