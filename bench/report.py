"""The result table: every figure with its unit and N, and the ratio lines, printed at the end."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Figure:
    section: str
    what: str
    value: float | None  # None: not measured (see note)
    unit: str
    n: int | None = None
    note: str = ""

    def value_text(self) -> str:
        if self.value is None:
            return "not measured"
        if self.unit in ("x", "ratio"):
            return f"{self.value:.2f}"
        if abs(self.value) >= 100:
            return f"{self.value:,.0f}"
        return f"{self.value:,.2f}"


@dataclass
class Report:
    figures: list[Figure] = field(default_factory=list)
    ratios: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # Herald's own figures that could not be had

    def add(
        self,
        section: str,
        what: str,
        value: float | None,
        unit: str,
        *,
        n: int | None = None,
        note: str = "",
    ) -> Figure:
        figure = Figure(section, what, value, unit, n, note)
        self.figures.append(figure)
        print(f"  {what}: {figure.value_text()} {unit}" + (f"  ({note})" if note else ""))
        return figure

    def ratio(self, label: str, numerator: float | None, denominator: float | None) -> None:
        if numerator is None or not denominator:
            line = f"{label} = not computable (a figure is missing)"
        else:
            line = f"{label} = {numerator / denominator:.2f}x"
        self.ratios.append(line)
        print(f"  {line}")

    def render(self) -> str:
        headers = ("section", "figure", "value", "unit", "N", "note")
        rows = [
            (
                f.section,
                f.what,
                f.value_text(),
                f.unit,
                f"{f.n:,}" if f.n is not None else "",
                f.note,
            )
            for f in self.figures
        ]
        widths = [
            max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
            for i, h in enumerate(headers)
        ]
        aligned_right = {2, 4}

        def line(cells: tuple[str, ...]) -> str:
            parts = [
                cell.rjust(widths[i]) if i in aligned_right else cell.ljust(widths[i])
                for i, cell in enumerate(cells)
            ]
            return "  ".join(parts).rstrip()

        out = [line(headers), line(tuple("-" * w for w in widths))]
        out += [line(r) for r in rows]
        if self.ratios:
            out += ["", "ratios:"] + [f"  {r}" for r in self.ratios]
        if self.notes:
            out += ["", "notes:"] + [f"  - {n}" for n in self.notes]
        return "\n".join(out)
