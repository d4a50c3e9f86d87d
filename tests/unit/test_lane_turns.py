"""The lanes' turn-taking (dispatch/lane_turns.py), driven by real threads with generated work.

Each lane runs its batches as the committer does (dispatch/committer.py, ``_serve``): before it
takes new work it lets holders in; a small batch waits until the lanes are quiet; then the
batch takes its turn, exclusive or not. Whatever the mix and the number of lanes:

- every batch runs once, and no lane waits for ever (a deadline, not a fixed sleep);
- an exclusive batch never runs beside another transaction;
- a small batch that was let in starts beside large batches only: the lanes were quiet when
  it was let in, and until it is in its transaction no other small batch may start.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from dispatch.lane_turns import LaneTurns

DEADLINE = 10.0  # seconds: a lane still waiting then is stuck


@dataclass(frozen=True)
class Batch:
    exclusive: bool
    small: bool
    hold: float  # seconds inside the transaction


batches = st.builds(
    Batch,
    exclusive=st.booleans(),
    small=st.booleans(),
    hold=st.sampled_from([0.0, 0.0, 0.0005, 0.001]),
)


class Ledger:
    """What is inside a transaction at each moment, and every breach of the rules."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.inside: dict[int, tuple[Batch, bool]] = {}  # lane -> (batch, let in)
        self.ran: list[tuple[int, int]] = []
        self.breaches: list[str] = []

    def enter(self, lane: int, index: int, batch: Batch, let_in: bool) -> None:
        with self.lock:
            others = list(self.inside.values())
            if batch.exclusive and others:
                self.breaches.append(f"exclusive {lane}/{index} beside {others}")
            if any(other.exclusive for other, _ in others):
                self.breaches.append(f"{lane}/{index} beside an exclusive batch")
            if let_in and any(other.small for other, _ in others):
                self.breaches.append(f"let-in {lane}/{index} beside a small batch: {others}")
            self.inside[lane] = (batch, let_in)
            self.ran.append((lane, index))

    def leave(self, lane: int) -> None:
        with self.lock:
            del self.inside[lane]


def lane(turns: LaneTurns, ledger: Ledger, number: int, work: list[Batch]) -> None:
    for index, batch in enumerate(work):
        turns.let_holders_in()
        let_in = turns.wait_until_quiet() if batch.small else False
        if let_in:
            time.sleep(0.0002)  # the committer takes what was queued meanwhile
        with turns.turn(batch.exclusive, let_in=let_in):
            ledger.enter(number, index, batch, let_in)
            if batch.hold:
                time.sleep(batch.hold)  # a transaction's length, not a wait for an event
            ledger.leave(number)


@settings(max_examples=60, deadline=None)
@given(work=st.lists(st.lists(batches, max_size=12), min_size=2, max_size=4))
def test_every_batch_runs_once_by_the_rules_and_no_lane_is_stuck(work: list[list[Batch]]) -> None:
    turns = LaneTurns()
    ledger = Ledger()
    threads = [
        threading.Thread(target=lane, args=(turns, ledger, n, batches), daemon=True)
        for n, batches in enumerate(work)
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + DEADLINE
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    assert not any(thread.is_alive() for thread in threads), "a lane never got its turn"
    assert ledger.breaches == []
    assert sorted(ledger.ran) == sorted(
        (n, i) for n, batches in enumerate(work) for i in range(len(batches))
    )


def test_a_held_batch_goes_before_the_lane_that_just_committed() -> None:
    """Lane A is in a transaction; lane B holds a small batch. When A's transaction ends, A
    cannot take new work until B is in its transaction, and can as soon as B is (not only once
    B's transaction has ended)."""
    turns = LaneTurns()
    order: list[str] = []
    a_inside = threading.Event()
    release_a = threading.Event()
    b_holding = threading.Event()
    a_took_work = threading.Event()
    seen: list[bool] = []  # whether B saw A take new work from inside its transaction

    def lane_a() -> None:
        with turns.turn(False):
            a_inside.set()
            assert release_a.wait(DEADLINE)
        turns.let_holders_in()
        order.append("A takes new work")
        a_took_work.set()

    def lane_b() -> None:
        assert a_inside.wait(DEADLINE)
        b_holding.set()
        let_in = turns.wait_until_quiet()
        assert let_in
        time.sleep(0.01)  # B is slow to start: A must still wait for it
        with turns.turn(False, let_in=let_in):
            order.append("B in its transaction")
            seen.append(a_took_work.wait(DEADLINE))  # A is let go while B's runs

    threads = [threading.Thread(target=lane_a), threading.Thread(target=lane_b)]
    for thread in threads:
        thread.start()
    assert b_holding.wait(DEADLINE)
    deadline = time.monotonic() + DEADLINE
    while not turns._holding:  # B is counted as holding before A's transaction ends
        assert time.monotonic() < deadline
        time.sleep(0.001)
    release_a.set()
    for thread in threads:
        thread.join(DEADLINE)
    assert order == ["B in its transaction", "A takes new work"]
    assert seen == [True]
