"""``make bench``'s occurrence section (bench.occurrence) on both databases: a weekly campaign's
first occurrence enqueues one job per recipient, composed in the pass's process or in a pool
(a pass that enqueued fewer would fail the measurement)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.occurrence import measure_occurrence, write_weekly
from scheduler.check_pool import CheckPool


@pytest.mark.parametrize("pool", [None, CheckPool(2, block=4, min_rows=1)], ids=["one", "pool"])
def test_the_occurrence_section_measures_one_weekly_fan_out(
    db_url: str, tmp_path: Path, pool: CheckPool | None
) -> None:
    figures = measure_occurrence(db_url, write_weekly(tmp_path / "w", 30, "bench-weekly"), 30, pool)
    assert figures.jobs == 30
    assert figures.seconds > 0
