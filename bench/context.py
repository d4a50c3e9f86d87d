"""What every section of ``bench.run`` shares: the options, the report, how failures are told."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from bench.report import Figure, Report

T = TypeVar("T")


@dataclass(frozen=True)
class Options:
    jobs: int
    concurrency: int
    repeat: int
    procrastinate_jobs: int
    pgqueuer_batches: tuple[int, ...]
    recipients: int
    smtp_messages: int
    smtp_concurrency: int
    smtp_repeat: int
    recovery_lease: float
    sections: tuple[str, ...]
    tracemalloc: bool
    json_path: str
    # Seconds a reply of the relay in the second SMTP comparison (a relay across a network);
    # 0 leaves it out.
    smtp_relay_delay: float = 0.005


@dataclass
class Context:
    options: Options
    report: Report
    postgres: bool
    # Herald's figures that later ratios are taken against, by name (e.g. "drain/postgresql").
    figures: dict[str, Figure] = field(default_factory=dict)


def section(title: str) -> None:
    print(f"\n== {title}")


def attempt(ctx: Context, name: str, measure: Callable[[], T]) -> T | None:
    """Run one of Herald's own measurements; a failure is reported and the run goes on."""
    try:
        return measure()
    except Exception as exc:
        herald_failed(ctx, name, f"{type(exc).__name__}: {exc}")
        return None


def herald_failed(ctx: Context, name: str, reason: str) -> None:
    """One of Herald's own figures could not be had: the run's exit status becomes 1."""
    line = f"{name}: not measured ({reason})"
    ctx.report.failed.append(line)
    print(f"  {line}")


def not_measured(ctx: Context, name: str, reason: str) -> None:
    """A comparison or another helper's section is missing: reported, not a failure."""
    line = f"{name}: not measured: {reason}"
    ctx.report.missing.append(line)
    print(f"  {line}")
