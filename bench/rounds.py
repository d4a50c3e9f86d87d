"""Interleaved repetitions: A, B, C, then B, C, A — never A, A, A, B, B, B.

Load on a shared machine drifts over minutes; running every contender once per round spreads the
drift over all of them instead of handing it to whichever ran last. Each round starts one
contender further on, so each goes first in turn: on the reference machines the first run after
a pause was 20–30 % faster than the next ones, whoever ran it. The load is sampled just
before every run (``bench.load.sample_load``) and kept with it.

A contender that cannot be measured at all (``NotMeasured``: not installed, no server) is
dropped after its first attempt; any other failure costs that repetition only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from bench.cpu import CpuUse
from bench.extras import NotMeasured
from bench.load import LoadSample, sample_load


class Run(Protocol):
    """What every drain measurement returns (Herald's, pgqueuer's, procrastinate's, raw SQL)."""

    @property
    def jobs(self) -> int: ...
    @property
    def seconds(self) -> float: ...
    @property
    def cpu(self) -> CpuUse: ...


@dataclass(frozen=True)
class Contender:
    name: str
    measure: Callable[[], Any]
    describe: Callable[[Any], str] = lambda run: ""


@dataclass
class Outcome:
    runs: list[Any] = field(default_factory=list)
    loads: list[LoadSample] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    unavailable: str | None = None  # NotMeasured's reason: no repetition was attempted after it

    @property
    def measured(self) -> bool:
        return bool(self.runs)


def order(names: Sequence[str], repeat: int) -> list[tuple[int, str]]:
    """(round, name) in the order they run: every name once per round, round r starting with
    name r (modulo their number)."""
    count = len(names)
    return [(r, names[(r + i) % count]) for r in range(repeat) for i in range(count)]


def interleave(
    contenders: Sequence[Contender],
    repeat: int,
    sampler: Callable[[], LoadSample] = sample_load,
    say: Callable[[str], None] = print,
) -> dict[str, Outcome]:
    by_name = {c.name: c for c in contenders}
    outcomes = {c.name: Outcome() for c in contenders}
    for round_index, name in order(list(by_name), repeat):
        outcome, contender = outcomes[name], by_name[name]
        if outcome.unavailable is not None:
            continue
        load = sampler()
        prefix = f"  [{round_index + 1}/{repeat}] {name}"
        try:
            run = contender.measure()
        except NotMeasured as exc:
            outcome.unavailable = str(exc)
            say(f"{prefix}: not measured ({exc})")
            continue
        except Exception as exc:  # one failed repetition is reported; the others still count
            outcome.errors.append(f"{type(exc).__name__}: {exc}")
            say(f"{prefix}: failed ({outcome.errors[-1]})")
            continue
        outcome.runs.append(run)
        outcome.loads.append(load)
        detail = contender.describe(run)
        say(f"{prefix}: {detail}  (load {load.load1:.2f}{_busy(load)})")
    return outcomes


def _busy(load: LoadSample) -> str:
    return "" if load.others_busy is None else f", others busy {load.others_busy:.0%}"


def rate(run: Run) -> float:
    return run.jobs / run.seconds


def cpu_per_job(run: Run) -> tuple[float, float | None]:
    """(process µs/job, PostgreSQL backends µs/job or None)."""
    return run.cpu.per_job_us(run.jobs)
