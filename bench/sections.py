"""Sections 0 and 2–5 of ``bench.run``: start-up, fan-out (and drips), SMTP, recovery, outbox
size.

(Section 1, the interleaved drains, is ``bench.compare``.)
"""

from __future__ import annotations

import tempfile
from functools import partial
from pathlib import Path
from typing import Any

from bench import drip, fanout, occurrence, startup
from bench.context import Context, attempt, herald_failed, not_measured, section
from bench.databases import fresh_database
from bench.load import sample_load
from bench.optional import lookup
from bench.recovery import measure_recovery
from bench.report import Target
from bench.rounds import Contender, interleave
from bench.smtp_e2e import measure_smtp
from scheduler.check_pool import CheckPool

MiB = 1024 * 1024
FLAT_RSS_RATIO = 1.25  # "flat in audience size": twice the audience, at most 25 % more memory


def backend_of(ctx: Context) -> str:
    return "postgresql" if ctx.postgres else "sqlite"


# ---------------------------------------------------------------- 0. start-up


def run_startup(ctx: Context) -> None:
    section(f"0. Start-up of the herald command (median and range of {startup.RUNS} runs)")
    load = sample_load()
    for result in attempt(ctx, "startup", startup.measure) or []:
        ctx.report.add(
            "startup",
            f"herald {result.command}",
            result.times,
            "s",
            n=result.runs,
            note="wall time" + ("" if result.command == "--help" else ", empty migrated SQLite"),
            loads=[load] * result.runs,
            target=Target(f"herald {result.command} start-up (s)", "≤", result.target_seconds),
        )


# ---------------------------------------------------------------- 2. fan-out


def run_fanout(ctx: Context) -> None:
    opts = ctx.options
    backend = backend_of(ctx)
    sizes = (opts.recipients, opts.recipients * 2)
    section(f"2. Launch fan-out, 1 step, on {backend} (N={sizes[0]:,} and {sizes[1]:,})")
    growth = launch_sizes(ctx, backend, sizes, opts.tracemalloc)
    small, large = sizes
    ctx.report.ratio(
        f"fan-out peak RSS growth {large:,}/{small:,} recipients",
        growth.get(large),
        growth.get(small),
        Target("fan-out RSS flat in audience size (ratio)", "≤", FLAT_RSS_RATIO),
    )


def launch_sizes(
    ctx: Context, backend: str, sizes: tuple[int, ...], traced: bool
) -> dict[int, float]:
    """Launch each size once (plus a traced launch if asked); returns RSS growth in MiB by size."""
    growth: dict[int, float] = {}
    name = f"fanout/{backend}"
    with tempfile.TemporaryDirectory(prefix="herald-bench-fanout-") as folder:
        for size in sizes:
            path = fanout.write_campaign(Path(folder) / str(size), size, f"bench-{size}")
            loads = [sample_load()]
            run = attempt(ctx, name, partial(_launch, backend, path, size, False))
            if run is not None:
                growth[size] = run.rss_growth_bytes / MiB
                rep = ctx.report
                rep.add(
                    name,
                    "launch throughput",
                    run.messages_per_second,
                    "messages/s",
                    n=size,
                    note=f"{run.seconds:.2f} s",
                    loads=loads,
                )
                rep.add(name, "launch time", run.seconds, "s", n=size, loads=loads)
                rep.add(
                    name,
                    "peak RSS growth during launch",
                    growth[size],
                    "MiB",
                    n=size,
                    note="child process, imports excluded",
                    loads=loads,
                )
                for what, peak_bytes, note in (
                    ("peak RSS of the launch process", run.peak_rss_bytes, "imports included"),
                    (
                        "peak RSS of a check process",
                        run.children_peak_rss_bytes,
                        "forked by the launch (scheduler.check_pool); shares its pages",
                    ),
                ):
                    if peak_bytes is not None:
                        rep.add(name, what, peak_bytes / MiB, "MiB", n=size, note=note, loads=loads)
            if traced:
                run = attempt(ctx, name, partial(_launch, backend, path, size, True))
                if run is not None and run.traced_peak_bytes is not None:
                    ctx.report.add(
                        name,
                        "tracemalloc peak",
                        run.traced_peak_bytes / MiB,
                        "MiB",
                        n=size,
                        note=f"traced run, {run.seconds:.1f} s (not timed)",
                    )
    return growth


def _launch(backend: str, path: Path, size: int, traced: bool) -> fanout.LaunchFigures:
    with fresh_database(backend) as url:
        return fanout.measure_launch(url, path, size, traced=traced)


# ---------------------------------------------------------------- 2b. drips


def run_drip(ctx: Context) -> None:
    size = ctx.options.recipients
    backend = backend_of(ctx)
    section(f"2b. A drip's launch and passes, 2 steps, on {backend} (N={size:,}; information)")
    name = f"drip/{backend}"
    with tempfile.TemporaryDirectory(prefix="herald-bench-drip-") as folder:
        path = drip.write_drip(Path(folder), size, f"bench-drip-{size}")
        loads = [sample_load()]
        run = attempt(ctx, name, partial(_drip, backend, path, size))
    if run is None:
        return
    for what, seconds, note in (
        ("launch time", run.launch_seconds, "check, everyone enrolled, step 1 composed"),
        ("idle pass, a new process", run.idle_pass_seconds, "the CSV read again"),
        ("idle pass, CSV unchanged", run.idle_pass_unchanged_seconds, "a running scheduler"),
        ("pass with step 2 due", run.due_pass_seconds, f"{run.step_two_jobs:,} jobs"),
    ):
        ctx.report.add(name, what, seconds, "s", n=size, note=note, loads=loads)


def _drip(backend: str, path: Path, size: int) -> drip.DripFigures:
    with fresh_database(backend) as url:
        return drip.measure_drip(url, path, size)


def run_occurrence(ctx: Context) -> None:
    size = ctx.options.recipients
    backend = backend_of(ctx)
    section(
        f"2c. A weekly campaign's occurrence fanned out, on {backend} (N={size:,}; information)"
    )
    name = f"occurrence/{backend}"
    pool = occurrence.default_pool()
    runs = []
    with tempfile.TemporaryDirectory(prefix="herald-bench-weekly-") as folder:
        path = occurrence.write_weekly(Path(folder), size, f"bench-weekly-{size}")
        loads = [sample_load()]
        for label, used in (("one process", None), (_processes(pool), pool)):
            run = attempt(ctx, name, partial(_occurrence, backend, path, size, used))
            if run is None:
                return
            runs.append(run.seconds)
            note = "snapshot, compose, enqueue; composed in " + label
            ctx.report.add(name, f"pass, {label}", run.seconds, "s", n=size, note=note, loads=loads)
    if pool is not None:
        print(f"  occurrence in {_processes(pool)} / in one process = {runs[1] / runs[0]:.2f}x")


def _processes(pool: CheckPool | None) -> str:
    return "one process" if pool is None else f"{pool.processes} processes"


def _occurrence(
    backend: str, path: Path, size: int, pool: CheckPool | None
) -> occurrence.OccurrenceFigures:
    with fresh_database(backend) as url:
        return occurrence.measure_occurrence(url, path, size, pool)


# ---------------------------------------------------------------- 3. SMTP


def run_smtp(ctx: Context) -> None:
    opts = ctx.options
    backend = backend_of(ctx)
    section(
        f"3. SMTP into the Maildir sink, on {backend}, interleaved x{opts.smtp_repeat} "
        f"(N={opts.smtp_messages:,}, concurrency {opts.smtp_concurrency})"
    )
    _smtp_pair(
        ctx,
        "smtp",
        0.0,
        "sink (own process) makes each group of messages durable before their 250s",
        (
            "herald SMTP / bare aiosmtplib loop, same sink",
            Target("herald SMTP / bare SMTP", "≥", 0.8),
        ),
    )
    delay = opts.smtp_relay_delay
    if delay > 0:
        # Information: a relay across a network, where a send waits for round trips rather
        # than for this machine's disk or CPU (bench.smtp_e2e, SLOW_RELAY_PROCESS).
        section(
            f"3b. SMTP through a relay {delay * 1000:g} ms a round trip away, interleaved"
            f" x{opts.smtp_repeat} (information)"
        )
        where = f"relay {delay * 1000:g} ms a round trip"
        _smtp_pair(
            ctx,
            "smtp-relay",
            delay,
            f"{where}, stores nothing",
            (f"herald SMTP / bare aiosmtplib loop, {where} (information)", None),
        )


def _smtp_pair(
    ctx: Context,
    prefix: str,
    reply_delay: float,
    note: str,
    ratio: tuple[str, Target | None],
) -> None:
    """Herald and the bare loop into the same receiver, interleaved, and their ratio."""
    opts = ctx.options
    backend = backend_of(ctx)
    herald, bare = f"{prefix}/{backend}", f"{prefix}/bare aiosmtplib"

    # Every round's Maildir stays until the section ends (bench.smtp_e2e.run_maildir: removing
    # one round's files just before the next creates its own slowed the next round's sink).
    with tempfile.TemporaryDirectory(prefix="herald-bench-sinks-") as folder:
        series = Path(folder)

        def measure_herald() -> Any:
            with fresh_database(backend) as url:
                return measure_smtp(
                    url, opts.smtp_messages, opts.smtp_concurrency, reply_delay, series
                )

        contenders = [Contender(herald, measure_herald, _per_second)]
        bare_measure = lookup("bench.smtp_e2e", "measure_bare_smtp")
        if isinstance(bare_measure, str):
            not_measured(ctx, "SMTP ceiling (bare aiosmtplib loop)", bare_measure)
        else:
            measure = partial(
                bare_measure, opts.smtp_messages, opts.smtp_concurrency, reply_delay, series
            )
            contenders.append(Contender(bare, measure, _per_second))
        outcomes = interleave(contenders, opts.smtp_repeat)
    figures = {}
    for name, outcome in outcomes.items():
        if not outcome.measured:
            reason = outcome.unavailable or "; ".join(outcome.errors)
            if name == herald:
                herald_failed(ctx, name, reason)
            else:
                not_measured(ctx, name, reason)
            continue
        figures[name] = ctx.report.add(
            name,
            "SMTP throughput",
            [r.messages / r.seconds for r in outcome.runs],
            "messages/s",
            n=opts.smtp_messages,
            note=note,
            loads=outcome.loads,
        )
    if bare in figures:
        label, target = ratio
        ctx.report.ratio(label, figures.get(herald), figures[bare], target)


def _per_second(run: Any) -> str:
    return f"{run.messages / run.seconds:,.0f} messages/s in {run.seconds:.2f} s"


# ---------------------------------------------------------------- 4. recovery


def run_recovery(ctx: Context) -> None:
    backend, lease = backend_of(ctx), ctx.options.recovery_lease
    section(
        f"4. Recovery of a SIGKILLed worker's unstarted claims, on {backend} (lease {lease:g} s)"
    )
    loads = [sample_load()]

    def measure() -> Any:
        with fresh_database(backend) as url:
            return measure_recovery(url, lease_seconds=lease)

    result = attempt(ctx, f"recovery/{backend}", measure)
    if result is None:
        return
    ctx.report.add(
        f"recovery/{backend}",
        "kill → every claim sent by a second worker",
        result.seconds,
        "s",
        n=result.jobs,
        note=(
            f"lease {result.lease_seconds:g} s, recovery every {result.recovery_interval:g} s, "
            f"send grace {result.grace_seconds:g} s, poll {result.poll_interval:g} s"
        ),
        loads=loads,
        target=Target("recovery after a kill (s)", "≤", result.target_seconds),
    )


# ---------------------------------------------------------------- 5. outbox size


def run_outbox_size(ctx: Context) -> None:
    section("5. Outbox size per million sent jobs, before and after prune")
    measure = lookup("bench.outbox_size", "measure_outbox_size")
    if isinstance(measure, str):
        not_measured(ctx, "outbox size", measure)
        return
    if not ctx.postgres:
        not_measured(ctx, "outbox size", "PostgreSQL not reachable")
        return
    jobs = ctx.options.jobs

    def run() -> Any:
        with fresh_database("postgresql") as url:
            return measure(url, jobs)

    result = attempt(ctx, "outbox size", run)
    if result is None:
        return
    report_outbox_size(ctx, result, jobs)


def report_outbox_size(ctx: Context, result: Any, jobs: int) -> None:
    """Scalars as they are; each nested size set (``bench.outbox_size.Sizes``, bytes per million
    jobs) as its total in MiB, its parts in the note. Everything goes to the JSON's details."""
    as_dict = getattr(result, "as_dict", None)
    ctx.report.details["outbox_size"] = as_dict() if callable(as_dict) else vars(result)
    name = "outbox/postgresql"
    for key, value in vars(result).items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            if key != "jobs":
                ctx.report.add(name, key.replace("_", " "), value, "", n=jobs)
            continue
        total = getattr(value, "total", None)
        if isinstance(total, int | float):
            parts = ", ".join(
                f"{k.replace('_total', '')} {v / MiB:,.0f}"
                for k, v in vars(value).items()
                if k.endswith("_total")
            )
            what = f"size per million jobs, {key.replace('_', ' ')}"
            ctx.report.add(name, what, total / MiB, "MiB", n=jobs, note=parts)
