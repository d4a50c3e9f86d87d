"""``make bench``: Herald's speed and memory figures, and their ratios, measured in one run.

Sections: (0) start-up time of the ``herald`` command, (1) no-op drain on PostgreSQL and
SQLite, (2) pgqueuer on the same PostgreSQL, (3) launch fan-out throughput and memory at two
audience sizes, (4) SMTP end to end. Every
figure is printed as it is measured, then again in one table at the end. Exit status 1 when one
of Herald's own figures could not be measured; a missing comparison (pgqueuer) is not an error.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TypeVar

from bench import fanout, pgq, startup
from bench.cpu import CpuUse
from bench.databases import fresh_database, postgres_reachable, postgres_version
from bench.drain import DrainResult, measure_drain
from bench.report import Report
from bench.smtp_e2e import measure_smtp

T = TypeVar("T")

SECTIONS = ("startup", "drain", "pgqueuer", "fanout", "smtp")
MiB = 1024 * 1024


@dataclass(frozen=True)
class Options:
    jobs: int
    concurrency: int
    recipients: int
    smtp_messages: int
    smtp_concurrency: int
    sections: tuple[str, ...]
    tracemalloc: bool


@dataclass
class Context:
    options: Options
    report: Report
    postgres: bool
    herald_pg_rate: float | None = None
    herald_pg_cpu_us: float | None = None  # process + backend CPU per job, PostgreSQL drain


def parse_options(argv: list[str] | None = None) -> Options:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__)
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per drain (default 20000)")
    parser.add_argument("--concurrency", type=int, default=200, help="drain worker concurrency")
    parser.add_argument(
        "--recipients", type=int, default=20_000, help="fan-out audience; also run at 2x"
    )
    parser.add_argument("--smtp-messages", type=int, default=2_000)
    parser.add_argument("--smtp-concurrency", type=int, default=50)
    parser.add_argument(
        "--only", default=",".join(SECTIONS), help=f"comma-separated subset of {SECTIONS}"
    )
    parser.add_argument(
        "--tracemalloc",
        action="store_true",
        help="also report tracemalloc peaks for the fan-out (slow: about 4.5x per launch)",
    )
    args = parser.parse_args(argv)
    sections = tuple(s.strip() for s in args.only.split(",") if s.strip())
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown section(s): {', '.join(sorted(unknown))}")
    return Options(
        jobs=args.jobs,
        concurrency=args.concurrency,
        recipients=args.recipients,
        smtp_messages=args.smtp_messages,
        smtp_concurrency=args.smtp_concurrency,
        sections=sections,
        tracemalloc=args.tracemalloc,
    )


# ---------------------------------------------------------------- header


def print_header(ctx: Context) -> None:
    load1, _, _ = os.getloadavg()
    print("Herald benchmarks")
    print(f"  python {platform.python_version()}, {os.cpu_count()} cores, load average {load1:.2f}")
    if ctx.postgres:
        print(f"  PostgreSQL {postgres_version()} (a fresh database per measurement)")
    else:
        print("  PostgreSQL not reachable: PostgreSQL figures are not measured")
    if load1 > 1.0:
        ctx.report.notes.append(
            f"load average was {load1:.2f} at start: other work shares these "
            f"{os.cpu_count()} cores, so figures may be low"
        )
        print(f"  warning: {ctx.report.notes[-1]}")


def section(title: str) -> None:
    print(f"\n== {title}")


# ---------------------------------------------------------------- 0. start-up


def run_startup(ctx: Context) -> None:
    section(f"0. Start-up of the herald command (median of {startup.RUNS} runs)")
    results = attempt(ctx, "startup", startup.measure)
    for result in results or []:
        ctx.report.add(
            "startup",
            f"herald {result.command}",
            result.median_seconds,
            "s",
            n=result.runs,
            note=f"median wall time; target ≤ {result.target_seconds} s"
            + ("" if result.command == "--help" else ", empty migrated SQLite"),
        )


# ---------------------------------------------------------------- 1. drain


def run_drain(ctx: Context) -> None:
    opts = ctx.options
    section(f"1. Herald drain, no-op transport (N={opts.jobs:,}, concurrency {opts.concurrency})")
    backends = (["postgresql"] if ctx.postgres else []) + ["sqlite"]
    if not ctx.postgres:
        herald_failed(ctx, "drain/postgresql", "PostgreSQL not reachable")
    for backend in backends:
        result = attempt(ctx, f"drain/{backend}", partial(_drain_on, backend, opts))
        if result is not None:
            report_drain(ctx, backend, result)


def _drain_on(backend: str, opts: Options) -> DrainResult:
    with fresh_database(backend) as url:
        return measure_drain(url, opts.jobs, opts.concurrency)


def report_drain(ctx: Context, backend: str, r: DrainResult) -> None:
    rep, name = ctx.report, f"drain/{backend}"
    if backend == "postgresql":
        ctx.herald_pg_rate = r.jobs_per_second
    rep.add(
        name,
        "drain throughput",
        r.jobs_per_second,
        "jobs/s",
        n=r.jobs,
        note=f"{r.seconds:.2f} s; claim→T4→T5, 3 journal rows per job",
    )
    rep.add(name, "enqueue (T1, batches of 1,000)", r.jobs / r.enqueue_seconds, "jobs/s", n=r.jobs)
    rep.add(name, "committer transactions", r.stats.transactions, "txns", n=r.jobs)
    rep.add(name, "commits per job", r.commits_per_job, "commits/job", n=r.jobs)
    rep.add(name, "largest batch", r.stats.largest_batch, "requests", n=r.jobs)
    rep.add(
        name,
        "requests per transaction",
        r.requests_per_transaction,
        "requests/txn",
        n=r.jobs,
        note=_kinds(r.stats.by_kind),
    )
    total = report_cpu(ctx, name, r.cpu, r.jobs, "worker process (both threads)")
    if backend == "postgresql":
        ctx.herald_pg_cpu_us = total


def report_cpu(ctx: Context, name: str, cpu: CpuUse, jobs: int, who: str) -> float | None:
    """CPU µs per job of this process and of its PostgreSQL backends; returns their sum."""
    process_us, backend_us = cpu.per_job_us(jobs)
    ctx.report.add(name, "CPU per job, Python", process_us, "µs/job", n=jobs, note=who)
    if backend_us is None:
        return None
    ctx.report.add(name, "CPU per job, PostgreSQL backends", backend_us, "µs/job", n=jobs)
    return process_us + backend_us


def _kinds(by_kind: dict[str, int]) -> str:
    return ", ".join(f"{k} {v:,}" for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1]))


# ---------------------------------------------------------------- 2. pgqueuer


def run_pgqueuer(ctx: Context) -> None:
    section(f"2. pgqueuer drain on the same PostgreSQL (N={ctx.options.jobs:,})")
    try:
        if not ctx.postgres:
            raise pgq.NotMeasured("PostgreSQL not reachable")
        results = [pgq.measure_pgqueuer(ctx.options.jobs, b) for b in pgq.BATCH_SIZES]
    except pgq.NotMeasured as exc:
        print(f"  pgqueuer: not measured ({exc})")
        rate = pgq.REFERENCE_JOBS_PER_SECOND
        ctx.report.add(
            "pgqueuer", "drain throughput", rate, "jobs/s", note=f"reference, not measured: {exc}"
        )
        ctx.report.ratio("herald/pgqueuer (reference, not measured)", ctx.herald_pg_rate, rate)
        return
    cpus = [report_pgqueuer(ctx, result) for result in results]
    best = max(r.jobs_per_second for r in results)
    ctx.report.ratio("herald/pgqueuer (pgqueuer's better batch size)", ctx.herald_pg_rate, best)
    measured = [c for c in cpus if c is not None]
    if measured and ctx.herald_pg_cpu_us is not None:
        # CPU per job moves less than wall clock when other work shares the machine.
        ctx.report.ratio(
            "pgqueuer/herald CPU per job (Python + PostgreSQL; >1 = Herald cheaper)",
            min(measured),
            ctx.herald_pg_cpu_us,
        )


def report_pgqueuer(ctx: Context, result: pgq.PgqResult) -> float | None:
    note = (
        f"pgqueuer {result.version}, {result.event_loop}, asyncpg, {pgq.DEQUEUERS} "
        f"managers; {result.seconds:.2f} s"
    )
    if result.failed_runs:
        note += f"; after {len(result.failed_runs)} failed run(s): {result.failed_runs[0]}"
    ctx.report.add(
        "pgqueuer",
        f"drain throughput, batch {result.batch_size}",
        result.jobs_per_second,
        "jobs/s",
        n=result.jobs,
        note=note,
    )
    return report_cpu(ctx, "pgqueuer", result.cpu, result.jobs, f"batch {result.batch_size}")


# ---------------------------------------------------------------- 3. fan-out


def run_fanout(ctx: Context) -> None:
    opts = ctx.options
    backend = "postgresql" if ctx.postgres else "sqlite"
    sizes = (opts.recipients, opts.recipients * 2)
    section(f"3. Launch fan-out, 1 step, on {backend} (N={sizes[0]:,} and {sizes[1]:,})")
    growth: dict[int, float] = {}
    traced: dict[int, float] = {}
    name = f"fanout/{backend}"
    with tempfile.TemporaryDirectory(prefix="herald-bench-fanout-") as folder:
        for size in sizes:
            path = fanout.write_campaign(Path(folder) / str(size), size, f"bench-{size}")
            run = attempt(ctx, name, partial(_launch, backend, path, size, False))
            if run is not None:
                growth[size] = run.rss_growth_bytes / MiB
                ctx.report.add(
                    name,
                    "launch throughput",
                    run.messages_per_second,
                    "messages/s",
                    n=size,
                    note=f"{run.seconds:.2f} s",
                )
                ctx.report.add(
                    name,
                    "peak RSS growth during launch",
                    growth[size],
                    "MiB",
                    n=size,
                    note="child process, imports excluded",
                )
            if opts.tracemalloc:
                run = attempt(ctx, name, partial(_launch, backend, path, size, True))
                if run is not None and run.traced_peak_bytes is not None:
                    traced[size] = run.traced_peak_bytes / MiB
                    ctx.report.add(
                        name,
                        "tracemalloc peak",
                        traced[size],
                        "MiB",
                        n=size,
                        note=f"traced run, {run.seconds:.1f} s (not timed)",
                    )
    small, large = sizes
    label = f"{large:,}/{small:,} recipients"
    ctx.report.ratio(f"fan-out peak RSS growth {label}", growth.get(large), growth.get(small))
    if opts.tracemalloc:
        ctx.report.ratio(f"fan-out tracemalloc peak {label}", traced.get(large), traced.get(small))


def _launch(backend: str, path: Path, size: int, traced: bool) -> fanout.LaunchFigures:
    with fresh_database(backend) as url:
        return fanout.measure_launch(url, path, size, traced=traced)


# ---------------------------------------------------------------- 4. SMTP


def run_smtp(ctx: Context) -> None:
    opts = ctx.options
    backend = "postgresql" if ctx.postgres else "sqlite"
    section(
        f"4. SMTP end to end into the Maildir sink, on {backend} "
        f"(N={opts.smtp_messages:,}, concurrency {opts.smtp_concurrency})"
    )
    name = f"smtp/{backend}"

    def measure() -> float:
        with fresh_database(backend) as url:
            result = measure_smtp(url, opts.smtp_messages, opts.smtp_concurrency)
        return result.messages_per_second

    rate = attempt(ctx, name, measure)
    if rate is not None:
        ctx.report.add(
            name,
            "SMTP throughput",
            rate,
            "messages/s",
            n=opts.smtp_messages,
            note="sink fsyncs each message before 250",
        )


# ---------------------------------------------------------------- plumbing


def attempt(ctx: Context, name: str, measure: Callable[[], T]) -> T | None:
    try:
        return measure()
    except Exception as exc:  # a broken measurement is reported, and the run goes on
        herald_failed(ctx, name, f"{type(exc).__name__}: {exc}")
        return None


def herald_failed(ctx: Context, name: str, reason: str) -> None:
    line = f"{name}: not measured ({reason})"
    ctx.report.failed.append(line)
    print(f"  {line}")


RUNNERS: dict[str, Callable[[Context], None]] = {
    "startup": run_startup,
    "drain": run_drain,
    "pgqueuer": run_pgqueuer,
    "fanout": run_fanout,
    "smtp": run_smtp,
}


def main(argv: list[str] | None = None) -> int:
    options = parse_options(argv)
    ctx = Context(options, Report(), postgres=postgres_reachable())
    started = time.perf_counter()
    print_header(ctx)
    for name in SECTIONS:
        if name in options.sections:
            RUNNERS[name](ctx)
    print(f"\n== Results ({time.perf_counter() - started:.0f} s)\n")
    print(ctx.report.render())
    for line in ctx.report.failed:
        print(f"FAILED: {line}")
    return 1 if ctx.report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
