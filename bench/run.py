"""``make bench``: Herald's speed and memory figures, and their ratios, measured in one run.

Sections: (0) start-up of the ``herald`` command, (1) no-op drains interleaved with pgqueuer,
procrastinate and a raw-SQL floor on the same PostgreSQL (and Herald on SQLite, and through
PgBouncer when present), (2) launch fan-out throughput and memory at two audience sizes, (3) SMTP
end to end against a bare aiosmtplib loop into the same sink, (4) recovery time after a worker is
killed, (5) outbox size per million jobs. ``--only big`` (``make bench-big``): the 1,000,000-
recipient fan-out. Figures are medians with their range; ratios are of medians and are withheld
when the loads of the runs compared differed (see bench/README.md). Everything is also written as
JSON. Exit status 1 when one of Herald's own figures could not be measured; a missing comparison
is reported, not failed.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime

from bench import results
from bench.big import run_big
from bench.compare import run_drains
from bench.context import Context, Options
from bench.databases import postgres_reachable
from bench.load import sample_load
from bench.report import Report
from bench.sections import (
    run_drip,
    run_fanout,
    run_occurrence,
    run_outbox_size,
    run_recovery,
    run_smtp,
    run_startup,
)

SECTIONS = ("startup", "drain", "fanout", "drip", "occurrence", "smtp", "recovery", "outbox")
EXTRA_SECTIONS = ("big",)  # not in the default run
RUNNERS: dict[str, Callable[[Context], None]] = {
    "startup": run_startup,
    "drain": run_drains,
    "fanout": run_fanout,
    "drip": run_drip,
    "occurrence": run_occurrence,
    "smtp": run_smtp,
    "recovery": run_recovery,
    "outbox": run_outbox_size,
    "big": run_big,
}


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(",") if part.strip())


def parse_options(argv: list[str] | None = None) -> Options:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__)
    add = parser.add_argument
    add("--jobs", type=int, default=10_000, help="jobs per drain (default 10000)")
    # 500: a worker at concurrency c leases at most 2c jobs (its prefetch), so at 500 it may hold
    # the 1,000 that pgqueuer's five managers were measured to hold at once (bench.held).
    add(
        "--concurrency",
        type=int,
        default=500,
        help="Herald drain worker concurrency (default 500: at most 1,000 jobs leased)",
    )
    add("--repeat", type=int, default=3, help="interleaved rounds of the drains (default 3)")
    add("--procrastinate-jobs", type=int, default=1_000, help="jobs per procrastinate drain")
    add("--pgqueuer-batches", type=_ints, default=(100,), help="e.g. 10,100 (default 100)")
    add("--recipients", type=int, default=20_000, help="fan-out audience (also run at 2x); drips")
    add("--smtp-messages", type=int, default=2_000)
    add("--smtp-concurrency", type=int, default=50)
    add("--smtp-repeat", type=int, default=5, help="interleaved rounds of the SMTP pair")
    add(
        "--smtp-relay-delay",
        type=float,
        default=0.005,
        help="seconds a reply for the SMTP pair through a distant relay (default 0.005; 0: skip)",
    )
    add("--recovery-lease", type=float, default=5.0, help="lease of the killed worker's claims")
    add("--only", default=",".join(SECTIONS), help=f"subset of {SECTIONS + EXTRA_SECTIONS}")
    add("--tracemalloc", action="store_true", help="also tracemalloc peaks for the fan-out (slow)")
    add(
        "--json",
        default=results.DEFAULT_PATH,
        help=f"where to write the JSON ({results.DEFAULT_PATH})",
    )
    args = parser.parse_args(argv)
    sections = tuple(s.strip() for s in args.only.split(",") if s.strip())
    unknown = set(sections) - set(RUNNERS)
    if unknown:
        parser.error(f"unknown section(s): {', '.join(sorted(unknown))}")
    if args.repeat < 1 or args.smtp_repeat < 1:
        parser.error("--repeat and --smtp-repeat must be at least 1")
    if args.smtp_relay_delay < 0:
        parser.error("--smtp-relay-delay must not be negative")
    return Options(
        jobs=args.jobs,
        concurrency=args.concurrency,
        repeat=args.repeat,
        procrastinate_jobs=args.procrastinate_jobs,
        pgqueuer_batches=args.pgqueuer_batches,
        recipients=args.recipients,
        smtp_messages=args.smtp_messages,
        smtp_concurrency=args.smtp_concurrency,
        smtp_repeat=args.smtp_repeat,
        smtp_relay_delay=args.smtp_relay_delay,
        recovery_lease=args.recovery_lease,
        sections=sections,
        tracemalloc=args.tracemalloc,
        json_path=args.json,
    )


def print_header(ctx: Context, machine: dict[str, object]) -> None:
    load = sample_load()
    print("Herald benchmarks")
    print(
        f"  {machine['cpu']}, {machine['cores']} cores, python {machine['python']}, "
        f"commit {machine['commit']}"
    )
    busy = "" if load.others_busy is None else f", other processes {load.others_busy:.0%} busy"
    print(f"  load average {load.load1:.2f}{busy}")
    if ctx.postgres:
        print(f"  PostgreSQL {machine['postgresql']} (a fresh database per measurement)")
    else:
        print("  PostgreSQL not reachable: PostgreSQL figures are not measured")
    if load.load1 > 1.0:
        ctx.report.notes.append(
            f"load average was {load.load1:.2f} at start: other work shares these "
            f"{machine['cores']} cores, so absolute figures may be low; see each figure's load"
        )
        print(f"  warning: {ctx.report.notes[-1]}")


def main(argv: list[str] | None = None) -> int:
    options = parse_options(argv)
    ctx = Context(options, Report(), postgres=postgres_reachable())
    started_at = datetime.now(UTC)
    started = time.perf_counter()
    machine = results.machine_info(ctx.postgres)
    print_header(ctx, machine)
    for name in SECTIONS + EXTRA_SECTIONS:
        if name in options.sections:
            RUNNERS[name](ctx)
    elapsed = time.perf_counter() - started
    print(f"\n== Results ({elapsed:.0f} s)\n")
    print(ctx.report.render())
    path = results.write_json(ctx, machine, started_at, elapsed)
    print(f"\nJSON: {path}")
    for line in ctx.report.failed:
        print(f"FAILED: {line}")
    return 1 if ctx.report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
