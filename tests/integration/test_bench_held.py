"""How many jobs a queue held at once, read from its journal (bench.held): the figure that says
whether two drains compare fairly. The count against a brute force over generated intervals, and
Herald's journal query on a real drain on both databases."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bench.drain import measure_drain
from bench.held import most_at_once

# A job held from ``start`` until ``start + length`` (half-open: a job let go at t and another
# taken at t were never held together, as in one transaction's rows).
spans = st.lists(st.tuples(st.integers(0, 50), st.integers(1, 20)), max_size=40)


@given(spans)
def test_most_at_once_is_the_largest_overlap(held: list[tuple[int, int]]) -> None:
    events = [(start, +1) for start, _ in held] + [(start + n, -1) for start, n in held]
    expected = max(
        (sum(1 for s, n in held if s <= t < s + n) for t in range(0, 71)),
        default=0,
    )
    assert most_at_once(events) == expected


def test_a_drain_holds_at_most_its_prefetch_and_says_so(db_url: str) -> None:
    # A worker at concurrency c leases at most 2c jobs: at 3, never more than 6, and a drain of
    # 60 jobs fills that room at least once.
    result = measure_drain(db_url, 60, 3)
    assert result.held_at_once is not None
    assert 3 <= result.held_at_once <= 6
