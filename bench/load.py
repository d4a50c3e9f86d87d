"""How busy the machine was when a measurement started, and when two runs are too unlike to compare.

The reference machine has two cores shared with other work, so a figure measured while something
else ran is low for reasons that are not Herald's. Every repetition records, just before it starts:

- the 1-minute load average (``/proc/loadavg``, ``os.getloadavg``). It lags (an exponential
  average over a minute) and counts the benchmark's own previous repetition too, which is why
  repetitions are interleaved (A, B, C, A, B, C): every contender inherits about the same share of
  the benchmark's own load.
- the busy fraction of the whole machine over a short window (``/proc/stat``) minus this process's
  own CPU in that window: what *other* processes were doing at that moment, between repetitions,
  when the benchmark itself is idle. 0.5 means one of two cores was busy with other work.

The rule (``load_verdict``): a ratio of two figures is withheld when the median loads of their
repetitions differ by more than ``SPREAD_LIMIT`` (1.0: one core's worth of runnable work on the
2-core machine) *and* the busier is more than ``FACTOR_LIMIT`` (1.25) times the other. Both must
hold: on an idle machine 0.1 against 0.4 is a factor of four and means nothing; on a machine at
load 17, 17.1 against 18.4 is more than one apart and still the same contention for the two
cores. 0.4 against 2.9 is withheld; so is 2.0 against 3.2; 10 against 12 is not.
"""

from __future__ import annotations

import os
import resource
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

SPREAD_LIMIT = 1.0
FACTOR_LIMIT = 1.25
BUSY_WINDOW_SECONDS = 0.5


@dataclass(frozen=True)
class LoadSample:
    load1: float
    others_busy: float | None  # 0..1 of all cores, other processes; None without /proc/stat

    def as_dict(self) -> dict[str, float | None]:
        return {"load1": round(self.load1, 2), "others_busy": _round(self.others_busy)}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _cpu_jiffies() -> tuple[int, int] | None:
    """(busy, total) jiffies of all cores since boot, from the first line of /proc/stat."""
    try:
        with open("/proc/stat") as stat:
            fields = [int(v) for v in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    # user nice system idle iowait irq softirq steal [guest guest_nice: already in user/nice]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    total = sum(fields[:8])
    return total - idle, total


def _own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime + children.ru_utime + children.ru_stime


def others_busy_fraction(window: float = BUSY_WINDOW_SECONDS) -> float | None:
    """Share of all cores busy with other processes' work during ``window`` seconds."""
    before, own_before = _cpu_jiffies(), _own_cpu_seconds()
    time.sleep(window)
    after, own_after = _cpu_jiffies(), _own_cpu_seconds()
    if before is None or after is None or after[1] <= before[1]:
        return None
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    busy = after[0] - before[0] - (own_after - own_before) * ticks
    return min(1.0, max(0.0, busy / (after[1] - before[1])))


def sample_load(window: float = BUSY_WINDOW_SECONDS) -> LoadSample:
    return LoadSample(os.getloadavg()[0], others_busy_fraction(window))


def median_load(samples: Sequence[LoadSample]) -> float | None:
    return statistics.median(s.load1 for s in samples) if samples else None


def load_verdict(a: Sequence[LoadSample], b: Sequence[LoadSample]) -> str | None:
    """None when runs measured under loads ``a`` and ``b`` may be compared; else why not."""
    load_a, load_b = median_load(a), median_load(b)
    if load_a is None or load_b is None:
        return None  # a figure with no recorded load (e.g. a reference value) is not judged
    return loads_differ(load_a, load_b)


def loads_differ(load_a: float, load_b: float) -> str | None:
    low, high = sorted((load_a, load_b))
    if high - low > SPREAD_LIMIT and high > FACTOR_LIMIT * low:
        return f"load differed, {load_a:.1f} vs {load_b:.1f}"
    return None
