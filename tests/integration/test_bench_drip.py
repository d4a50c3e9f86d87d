"""``make bench``'s drip section (bench.drip) on both databases: a launch enrolls everyone, the
idle passes compose nothing, and the pass after every step 1 was sent composes step 2 for
each recipient (a pass that composed fewer would fail the measurement)."""

from __future__ import annotations

from pathlib import Path

from bench.drip import measure_drip, write_drip


def test_the_drip_section_measures_a_launch_and_three_passes(db_url: str, tmp_path: Path) -> None:
    figures = measure_drip(db_url, write_drip(tmp_path / "d", 30, "bench-drip"), 30)
    assert figures.step_two_jobs == 30
    assert (
        min(
            figures.launch_seconds,
            figures.idle_pass_seconds,
            figures.idle_pass_unchanged_seconds,
            figures.due_pass_seconds,
        )
        > 0
    )
