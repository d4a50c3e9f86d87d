"""The size of the dispatch loop's next claim (``dispatch.claim_room``): a wave at most, half a
wave while the backlog feeds the wire, and never less than an eighth of a wave. A claim is a
transaction on the loop's path, as long for one job as for hundreds; a drain whose claims asked
for the one job of room a straggling send left made every third claim a claim of one."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from dispatch.claim_room import claim_size


@st.composite
def held(draw: st.DrawFn) -> tuple[int, int, int, int]:
    """(concurrency, backlog, on_wire, settling) a worker can be in: at most ``concurrency``
    sends on the wire, everything held within the prefetch (twice the concurrency)."""
    concurrency = draw(st.integers(1, 600))
    on_wire = draw(st.integers(0, concurrency))
    settling = draw(st.integers(0, 2 * concurrency - on_wire))
    backlog = draw(st.integers(0, 2 * concurrency - on_wire - settling))
    return concurrency, backlog, on_wire, settling


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
def test_a_claim_fits_the_room_and_a_wave_and_is_never_tiny(
    state: tuple[int, int, int, int],
) -> None:
    concurrency, backlog, on_wire, settling = state
    room = 2 * concurrency - backlog - on_wire - settling
    got = size(concurrency, backlog, on_wire + settling)
    assert got == 0 or max(1, concurrency // 8) <= got == min(room, concurrency)


@given(held())
def test_when_a_claim_is_made(state: tuple[int, int, int, int]) -> None:
    concurrency, backlog, on_wire, settling = state
    room = 2 * concurrency - backlog - on_wire - settling
    got = size(concurrency, backlog, on_wire + settling)
    if room > 0 and room >= concurrency // 2:
        assert got == min(room, concurrency)  # half a wave of room: always
    elif backlog:
        assert got == 0  # the backlog feeds the wire until there is room for half a wave
    elif room >= max(1, concurrency // 8):
        assert got == room  # the wire would wait: a small claim, beside the settling commit
    else:
        assert got == 0


@given(held())
def test_the_loop_waits_only_while_more_than_half_a_wave_will_come_back(
    state: tuple[int, int, int, int],
) -> None:
    # Not claiming never leaves the wire waiting for nothing: the backlog feeds it, and the
    # sends settling (and the backlog's, once sent) give their room back as they end, each
    # waking the loop.
    concurrency, backlog, on_wire, settling = state
    room = 2 * concurrency - backlog - on_wire - settling
    if room > 0 and size(concurrency, backlog, on_wire + settling) == 0:
        assert backlog + settling > concurrency // 2
