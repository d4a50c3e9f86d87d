"""``make bench-big``: the 1,000,000-recipient fan-out on PostgreSQL, and its memory at 250k and 1M.

Too long for ``make bench`` (issue 12's target is 60 s for the million alone, plus writing the
CSVs). The launch is ``bench.fanout.measure_launch`` (a child process per launch, as in section 2).
Targets: 1M recipients launched in ≤ 60 s; peak RSS ≤ 300 MB; flat in audience size (1M/250k).
"""

from __future__ import annotations

from bench.context import Context, herald_failed, section
from bench.report import Target
from bench.sections import FLAT_RSS_RATIO, launch_sizes

SIZES = (250_000, 1_000_000)
LAUNCH_TARGET_SECONDS = 60.0
PEAK_RSS_TARGET_MIB = 300.0


def run_big(ctx: Context) -> None:
    small, large = SIZES
    section(f"6. Big fan-out on PostgreSQL (N={small:,} and {large:,})")
    if not ctx.postgres:
        herald_failed(ctx, "fanout/big", "PostgreSQL not reachable")
        return
    growth = launch_sizes(ctx, "postgresql", SIZES, traced=False)
    rep = ctx.report
    times = [f for f in rep.figures if f.what == "launch time" and f.n == large]
    seconds = times[-1].value if times else None
    rep.target(
        Target(f"{large:,}-recipient launch (s)", "≤", LAUNCH_TARGET_SECONDS),
        seconds,
        "—" if seconds is None else f"{seconds:.1f} s",
    )
    peak = max(growth.values()) if growth else None
    rep.target(
        Target("fan-out peak RSS growth (MiB)", "≤", PEAK_RSS_TARGET_MIB),
        peak,
        "—" if peak is None else f"{peak:.0f} MiB (growth over the child's RSS after imports)",
    )
    measured = ("peak RSS of the launch process", "peak RSS of a check process")
    peaks = [
        f.value for f in rep.figures if f.n == large and f.what in measured and f.value is not None
    ]
    rep.target(
        Target("peak RSS of any launch process (MiB)", "≤", PEAK_RSS_TARGET_MIB),
        max(peaks) if peaks else None,
        "—" if not peaks else " / ".join(f"{p:.0f}" for p in peaks) + " MiB (launch / check)",
    )
    rep.ratio(
        f"fan-out peak RSS growth {large:,}/{small:,} recipients",
        growth.get(large),
        growth.get(small),
        Target("fan-out RSS flat, 1M/250k (ratio)", "≤", FLAT_RSS_RATIO),
    )
