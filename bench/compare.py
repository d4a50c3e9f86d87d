"""Section 1: the drains, interleaved — Herald against pgqueuer, procrastinate and raw SQL.

Every contender drains no-op jobs on the same PostgreSQL server (each in a fresh database of its
own), once per round, ``--repeat`` rounds (``bench.rounds``). Herald also drains on SQLite, and
through PgBouncer when ``bench.pooler`` is present. Figures are medians with their range; ratios
are of medians, withheld when the loads differed (``bench.load``).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from bench import pgq
from bench.context import Context, Options, herald_failed, not_measured, section
from bench.databases import fresh_database
from bench.drain import DrainResult, measure_drain
from bench.extras import NotMeasured
from bench.optional import lookup
from bench.procrastinate_bench import measure_procrastinate
from bench.rawsql import measure_rawsql
from bench.report import Target
from bench.rounds import Contender, Outcome, cpu_per_job, interleave, rate

HERALD_PG, HERALD_SQLITE = "herald/postgresql", "herald/sqlite"
PGBOUNCER = "herald/pgbouncer"
PROCRASTINATE, RAWSQL = "procrastinate", "raw-SQL"
SQLITE_TARGET = Target("SQLite drain (jobs/s)", "≥", 5_000)


def pgq_name(batch: int) -> str:
    return f"pgqueuer/batch{batch}"


def run_drains(ctx: Context) -> None:
    opts = ctx.options
    section(
        f"1. Drains, no-op jobs, interleaved x{opts.repeat} (Herald N={opts.jobs:,}, concurrency "
        f"{opts.concurrency}; procrastinate N={opts.procrastinate_jobs:,})"
    )
    contenders = _contenders(ctx)
    outcomes = interleave(contenders, opts.repeat)
    for contender in contenders:
        _report(ctx, contender.name, outcomes[contender.name])
    _ratios(ctx)


def _contenders(ctx: Context) -> list[Contender]:
    opts = ctx.options
    found: list[Contender] = []
    if ctx.postgres:
        found.append(Contender(HERALD_PG, partial(_herald, "postgresql", opts), _describe))
    else:
        herald_failed(ctx, "drain/postgresql", "PostgreSQL not reachable")
    found.append(Contender(HERALD_SQLITE, partial(_herald, "sqlite", opts), _describe))
    if not ctx.postgres:
        not_measured(ctx, "comparisons (pgqueuer, procrastinate, raw SQL)", "no PostgreSQL")
        return found
    for batch in opts.pgqueuer_batches:
        found.append(
            Contender(pgq_name(batch), partial(pgq.measure_pgqueuer, opts.jobs, batch), _describe)
        )
    found.append(
        Contender(PROCRASTINATE, partial(measure_procrastinate, opts.procrastinate_jobs), _describe)
    )
    found.append(Contender(RAWSQL, partial(measure_rawsql, opts.jobs), _describe))
    pooled = lookup("bench.pooler", "measure_drain_via_pgbouncer")
    if isinstance(pooled, str):
        not_measured(ctx, PGBOUNCER, pooled)
    else:
        found.append(Contender(PGBOUNCER, _pooled(pooled, opts), _describe))
    return found


def _herald(backend: str, opts: Options) -> DrainResult:
    with fresh_database(backend) as url:
        return measure_drain(url, opts.jobs, opts.concurrency)


def _pooled(measure: Any, opts: Options) -> Any:
    def run() -> Any:
        try:
            return measure(opts.jobs, opts.concurrency)
        except Exception as exc:
            # bench.pooler.Unavailable: PgBouncer is not installed or would not start.
            if type(exc).__name__ == "Unavailable":
                raise NotMeasured(str(exc)) from exc
            raise

    return run


def _describe(run: Any) -> str:
    process, backends = cpu_per_job(run)
    cpu = f"{process:.0f}" + ("" if backends is None else f" + {backends:.0f}")
    return f"{rate(run):,.0f} jobs/s in {run.seconds:.2f} s, CPU {cpu} µs/job"


def _report(ctx: Context, name: str, outcome: Outcome) -> None:
    rep = ctx.report
    herald = name in (HERALD_PG, HERALD_SQLITE)  # a missing PgBouncer is not Herald failing
    if not outcome.measured:
        reason = outcome.unavailable or "; ".join(outcome.errors) or "not run"
        if herald:
            herald_failed(ctx, f"drain {name}", reason)
        else:
            not_measured(ctx, name, reason)
        return
    runs, loads = outcome.runs, outcome.loads
    jobs = runs[0].jobs
    note = _note(name, runs[0]) + (
        f"; {len(outcome.errors)} failed run(s)" if outcome.errors else ""
    )
    target = SQLITE_TARGET if name == HERALD_SQLITE else None
    ctx.figures[name] = rep.add(
        name,
        "drain throughput",
        [rate(r) for r in runs],
        "jobs/s",
        n=jobs,
        note=note,
        loads=loads,
        target=target,
        quiet=True,
    )
    cpus = [cpu_per_job(r) for r in runs]
    rep.add(
        name,
        "CPU per job, process",
        [c[0] for c in cpus],
        "µs/job",
        n=jobs,
        loads=loads,
        quiet=True,
    )
    if all(c[1] is not None for c in cpus):
        backends = [c[1] or 0.0 for c in cpus]
        rep.add(
            name,
            "CPU per job, PostgreSQL backends",
            backends,
            "µs/job",
            n=jobs,
            loads=loads,
            quiet=True,
        )
        ctx.figures[f"{name} cpu"] = rep.add(
            name,
            "CPU per job, process + backends",
            [c[0] + b for c, b in zip(cpus, backends, strict=True)],
            "µs/job",
            n=jobs,
            loads=loads,
            quiet=True,
        )
    held = [h for r in runs if isinstance(h := getattr(r, "held_at_once", None), int)]
    if len(held) == len(runs):  # bench.held: how many jobs the queue held at once
        ctx.figures[f"{name} held"] = rep.add(
            name, "jobs held at once (most)", held, "jobs", n=jobs, loads=loads, quiet=True
        )
    if isinstance(runs[0], DrainResult):
        _committer(ctx, name, runs)
    pooler = [getattr(r, "pooler_us_per_job", lambda: None)() for r in runs]
    us = [p for p in pooler if isinstance(p, float)]
    if len(us) == len(runs):  # bench.pooler: PgBouncer's own CPU
        rep.add(name, "CPU per job, PgBouncer", us, "µs/job", n=jobs, loads=loads, quiet=True)


def _committer(ctx: Context, name: str, runs: list[DrainResult]) -> None:
    rep, jobs = ctx.report, runs[0].jobs
    enqueue = [r.jobs / r.enqueue_seconds for r in runs]
    rep.add(name, "enqueue (T1, batches of 1,000)", enqueue, "jobs/s", n=jobs, quiet=True)
    rep.add(
        name,
        "commits per job",
        [r.commits_per_job for r in runs],
        "commits/job",
        n=jobs,
        quiet=True,
    )
    rep.add(
        name,
        "requests per transaction",
        [r.requests_per_transaction for r in runs],
        "requests/txn",
        n=jobs,
        quiet=True,
    )


def _note(name: str, run: Any) -> str:
    if name.startswith("herald/"):
        return "claim→T4→T5, 3 journal rows per job"
    if name.startswith("pgqueuer/"):
        return f"pgqueuer {run.version}, {run.event_loop}, asyncpg, {pgq.DEQUEUERS} managers"
    if name == PROCRASTINATE:
        return f"procrastinate {run.version}, concurrency {run.concurrency}, psycopg pool"
    if name == RAWSQL:
        return "4 psycopg conns, claim 100 SKIP LOCKED + 1 batched completion"
    return ""


def _ratios(ctx: Context) -> None:
    print()
    rep, figs = ctx.report, ctx.figures
    herald, herald_cpu = figs.get(HERALD_PG), figs.get(f"{HERALD_PG} cpu")
    pgq_rates = [figs[pgq_name(b)] for b in ctx.options.pgqueuer_batches if pgq_name(b) in figs]
    if pgq_rates:
        best = max(pgq_rates, key=lambda f: f.value or 0.0)
        rep.ratio(
            f"herald/pgqueuer drain ({best.section}, the better)",
            herald,
            best,
            Target("herald/pgqueuer drain", "≥", 1.0),
        )
        cpu = figs.get(f"{best.section} cpu")
        rep.ratio(
            f"herald/pgqueuer CPU per job ({best.section})",
            herald_cpu,
            cpu,
            Target("herald/pgqueuer CPU per job", "≤", 1.0),
        )
        # The drains compare fairly when both queues hold about as many jobs (bench.held).
        rep.ratio(
            f"herald/pgqueuer jobs held at once ({best.section}; information, fair near 1)",
            figs.get(f"{HERALD_PG} held"),
            figs.get(f"{best.section} held"),
        )
    elif ctx.options.pgqueuer_batches:
        reference = pgq.REFERENCE_JOBS_PER_SECOND
        rep.ratio(
            "herald/pgqueuer drain (reference figure, pgqueuer not measured)", herald, reference
        )
    rep.ratio(
        "herald/procrastinate drain",
        herald,
        figs.get(PROCRASTINATE),
        Target("herald/procrastinate drain", "≥", 20.0),
    )
    # procrastinate waits on a round trip per job; under load its wall rate falls less than a
    # CPU-bound drain's, so its CPU per job says more about the two than the rate does.
    rep.ratio(
        "procrastinate/herald CPU per job (information; >1 = Herald cheaper)",
        figs.get(f"{PROCRASTINATE} cpu"),
        herald_cpu,
    )
    rep.ratio("herald/raw-SQL drain (information)", herald, figs.get(RAWSQL))
    rep.ratio("herald/raw-SQL CPU per job (information)", herald_cpu, figs.get(f"{RAWSQL} cpu"))
    if PGBOUNCER in figs:
        rep.ratio("herald via PgBouncer / direct (information)", figs[PGBOUNCER], herald)
