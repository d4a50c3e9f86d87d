"""Figures (median and range of their repetitions), ratios of medians, targets; table and JSON.

A figure keeps every repetition's value and the load sampled before each (``bench.load``). A ratio
divides two medians, and is withheld, not printed, when the two figures' loads differ too much
(``bench.load.load_verdict``). A target is a figure or ratio with a bound; the targets table says
MET or NOT MET for each, or why it could not be judged.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.load import LoadSample, load_verdict, median_load


def median_range(values: Sequence[float]) -> tuple[float, float, float]:
    """(median, min, max) of at least one value."""
    if not values:
        raise ValueError("no values")
    return statistics.median(values), min(values), max(values)


def _number(value: float, unit: str) -> str:
    if unit in ("x", "ratio"):
        return f"{value:.2f}"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:,.2f}"


@dataclass(frozen=True)
class Figure:
    section: str
    what: str
    samples: tuple[float, ...]  # one per repetition; empty: not measured (see note)
    unit: str
    n: int | None = None
    note: str = ""
    loads: tuple[LoadSample, ...] = ()

    @property
    def value(self) -> float | None:
        return median_range(self.samples)[0] if self.samples else None

    def value_text(self) -> str:
        if not self.samples:
            return "not measured"
        median, low, high = median_range(self.samples)
        text = _number(median, self.unit)
        if len(self.samples) > 1:
            text += f" ({_number(low, self.unit)}–{_number(high, self.unit)})"
        return text

    def as_dict(self) -> dict[str, Any]:
        median, low, high = median_range(self.samples) if self.samples else (None, None, None)
        return {
            "section": self.section,
            "figure": self.what,
            "unit": self.unit,
            "n": self.n,
            "median": median,
            "min": low,
            "max": high,
            "samples": list(self.samples),
            "loads": [load.as_dict() for load in self.loads],
            "note": self.note,
        }


@dataclass(frozen=True)
class Target:
    """``value <op> bound``; op is "≥" or "≤"."""

    what: str
    op: str
    bound: float

    def met(self, value: float) -> bool:
        return value >= self.bound if self.op == "≥" else value <= self.bound

    def text(self) -> str:
        return f"{self.op} {self.bound:g}"


@dataclass(frozen=True)
class Ratio:
    label: str
    value: float | None
    withheld: str | None = None  # why the ratio is not printed, e.g. "load differed, 0.4 vs 2.9"
    target: Target | None = None
    loads: tuple[float | None, float | None] = (None, None)

    def text(self) -> str:
        if self.withheld:
            return f"{self.label} = withheld: {self.withheld}"
        if self.value is None:
            return f"{self.label} = not computable (a figure is missing)"
        return f"{self.label} = {self.value:.2f}x"

    def as_dict(self) -> dict[str, Any]:
        return {
            "ratio": self.label,
            "value": self.value,
            "withheld": self.withheld,
            "median_loads": list(self.loads),
            "target": self.target.text() if self.target else None,
        }


Operand = Figure | float | None


def _operand(x: Operand) -> tuple[float | None, tuple[LoadSample, ...]]:
    if isinstance(x, Figure):
        return x.value, x.loads
    return x, ()


def verdict(target: Target, value: float | None, withheld: str | None = None) -> str:
    if withheld:
        return f"withheld: {withheld}"
    if value is None:
        return "not measured"
    return "MET" if target.met(value) else "NOT MET"


@dataclass
class Report:
    figures: list[Figure] = field(default_factory=list)
    ratios: list[Ratio] = field(default_factory=list)
    targets: list[tuple[Target, str, str]] = field(
        default_factory=list
    )  # target, measured, verdict
    notes: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # Herald's own figures that could not be had
    missing: list[str] = field(default_factory=list)  # comparisons and sections not measured
    details: dict[str, Any] = field(default_factory=dict)  # JSON only, e.g. every outbox size

    def add(
        self,
        section: str,
        what: str,
        value: float | Sequence[float] | None,
        unit: str,
        *,
        n: int | None = None,
        note: str = "",
        loads: Sequence[LoadSample] = (),
        target: Target | None = None,
        quiet: bool = False,
    ) -> Figure:
        if value is None:
            samples: tuple[float, ...] = ()
        elif isinstance(value, int | float):
            samples = (float(value),)
        else:
            samples = tuple(float(v) for v in value)
        figure = Figure(section, what, samples, unit, n, note, tuple(loads))
        self.figures.append(figure)
        if target is not None:
            self.target(target, figure.value, f"{figure.value_text()} {unit}")
        if not quiet:
            print(f"  {what}: {figure.value_text()} {unit}" + (f"  ({note})" if note else ""))
        return figure

    def ratio(
        self, label: str, numerator: Operand, denominator: Operand, target: Target | None = None
    ) -> Ratio:
        top, top_loads = _operand(numerator)
        bottom, bottom_loads = _operand(denominator)
        value = top / bottom if top is not None and bottom else None
        withheld = load_verdict(top_loads, bottom_loads) if value is not None else None
        ratio = Ratio(
            label, value, withheld, target, (median_load(top_loads), median_load(bottom_loads))
        )
        self.ratios.append(ratio)
        if target is not None:
            # A withheld ratio is not printed anywhere, the targets table included.
            measured = "—" if value is None or withheld else f"{value:.2f}x"
            self.target(target, value, measured, withheld)
        print(f"  {ratio.text()}")
        return ratio

    def target(
        self, target: Target, value: float | None, measured: str, withheld: str | None = None
    ) -> None:
        self.targets.append((target, measured, verdict(target, value, withheld)))

    def render(self) -> str:
        headers = ("section", "figure", "median (min–max)", "unit", "N", "load", "note")
        rows = [
            (
                f.section,
                f.what,
                f.value_text(),
                f.unit,
                f"{f.n:,}" if f.n is not None else "",
                _load_text(f.loads),
                f.note,
            )
            for f in self.figures
        ]
        out = table(headers, rows, right={2, 4, 5})
        if self.ratios:
            out += ["", "ratios (of medians):"] + [f"  {r.text()}" for r in self.ratios]
        if self.targets:
            out += ["", "targets:"]
            verdicts = [(t.what, t.text(), measured, v) for t, measured, v in self.targets]
            out += ["  " + r for r in table(("target", "bound", "measured", "verdict"), verdicts)]
        if self.missing:
            out += ["", "not measured:"] + [f"  - {m}" for m in self.missing]
        if self.notes:
            out += ["", "notes:"] + [f"  - {n}" for n in self.notes]
        return "\n".join(out)

    def as_dict(self) -> dict[str, Any]:
        return {
            "figures": [f.as_dict() for f in self.figures],
            "ratios": [r.as_dict() for r in self.ratios],
            "targets": [
                {"target": t.what, "bound": t.text(), "measured": m, "verdict": v}
                for t, m, v in self.targets
            ],
            "not_measured": list(self.missing),
            "failed": list(self.failed),
            "notes": list(self.notes),
            "details": self.details,
        }


def _load_text(loads: Sequence[LoadSample]) -> str:
    if not loads:
        return ""
    values = [s.load1 for s in loads]
    low, high = min(values), max(values)
    return f"{low:.1f}" if high - low < 0.05 else f"{low:.1f}–{high:.1f}"


def table(
    headers: tuple[str, ...], rows: Sequence[tuple[str, ...]], right: set[int] | None = None
) -> list[str]:
    right = right or set()
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]

    def line(cells: tuple[str, ...]) -> str:
        parts = [
            cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
            for i, cell in enumerate(cells)
        ]
        return "  ".join(parts).rstrip()

    return [line(headers), line(tuple("-" * w for w in widths))] + [line(r) for r in rows]
