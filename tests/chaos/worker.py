"""The chaos suite's worker: ``herald worker`` built with the test instruments.

    python -m tests.chaos.worker --database-url URL --smtp-url URL [herald worker options]
        [--crash-at after_t4_commit:0.05,after_claim_commit:0.01,seed=N]
        [--stop-after-claim SENDS:MARKER] [--unguarded-t4]

Same options, defaults and output as ``herald worker``, plus three that only exist here:
``--crash-at`` SIGKILLs the process at named points of a send (``tests/chaos/instruments.py``),
``--stop-after-claim`` SIGSTOPs it after a claim once it has recorded SENDS outcomes (the first
worker to create the MARKER file does), and ``--unguarded-t4`` runs the naive worker whose T4
has no guards. The shipped CLI has none of them, and no environment variable that changes what
a worker does.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from dispatch.instrumentation import Instrumentation, NullInstrumentation
from dispatch.worker import Worker
from herald.app import worker as herald_worker
from herald.app.worker import WorkerOptions
from herald.db import create_engine
from herald.schema import ensure_schema
from herald.settings import DEFAULT_DATABASE_URL, DEFAULT_SMTP_URL
from tests.chaos.instruments import (
    CrashInstrumentation,
    CrashPointError,
    CrashPoints,
    StopAfterClaim,
    UnguardedStore,
    trust_every_lease,
)


def _crash_points(spec: str) -> CrashPoints:
    try:
        return CrashPoints.parse(spec)
    except CrashPointError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _stop_after_claim(spec: str) -> StopAfterClaim:
    sends, sep, marker = spec.partition(":")
    if not sep or not sends.isdigit() or not marker:
        raise argparse.ArgumentTypeError(f"expected SENDS:MARKER, got {spec!r}")
    return StopAfterClaim(int(sends), Path(marker))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tests.chaos.worker", description=__doc__)
    env = os.environ.get
    p.add_argument("--database-url", default=env("HERALD_DATABASE_URL", DEFAULT_DATABASE_URL))
    p.add_argument("--smtp-url", default=env("HERALD_SMTP_URL", DEFAULT_SMTP_URL))
    p.add_argument("--concurrency", type=int, default=20)
    p.add_argument("--lease", type=float, default=120.0)
    p.add_argument("--recovery-interval", type=float, default=5.0)
    p.add_argument("--shutdown-grace", type=float, default=30.0)
    p.add_argument("--until-idle", action="store_true")
    p.add_argument("--idle-horizon", type=float, default=60.0)
    p.add_argument("--retry-base", type=float, default=30.0)
    p.add_argument("--poll", type=float, default=1.0)
    p.add_argument("--json", action="store_true", dest="as_json")
    p.add_argument("--crash-at", type=_crash_points, default=None)
    p.add_argument("--stop-after-claim", type=_stop_after_claim, default=None)
    p.add_argument("--unguarded-t4", action="store_true")
    args = p.parse_args(argv)
    if args.crash_at is not None and args.stop_after_claim is not None:
        p.error("--crash-at and --stop-after-claim are different chaos runs: pick one")
    return args


def build_worker(args: argparse.Namespace) -> Worker:
    engine = create_engine(args.database_url)
    ensure_schema(engine)
    options = WorkerOptions(
        concurrency=args.concurrency,
        lease=args.lease,
        recovery_interval=args.recovery_interval,
        shutdown_grace=args.shutdown_grace,
        until_idle=args.until_idle,
        idle_horizon=args.idle_horizon,
        retry_base=args.retry_base,
        poll=args.poll,
    )
    instrumentation: Instrumentation = NullInstrumentation()
    if args.crash_at is not None:
        instrumentation = CrashInstrumentation(args.crash_at)
    elif args.stop_after_claim is not None:
        instrumentation = args.stop_after_claim
    store = None
    if args.unguarded_t4:
        sys.stderr.write("TEST MODE: T4 guards are OFF; duplicates are possible\n")
        store = UnguardedStore(engine.dialect.name)
    worker = herald_worker.build_worker(
        engine, args.smtp_url, options, instrumentation=instrumentation, store=store
    )
    if args.unguarded_t4:
        trust_every_lease(worker.leases)
    if args.stop_after_claim is not None:
        args.stop_after_claim.bind(worker.committer.quiet)
    return worker


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    report = herald_worker.run_worker(build_worker(args), handle_signals=True)
    if args.as_json:
        print(json.dumps(report.as_dict()))
    else:
        r = report
        print(
            f"worker done: {r.sent} sent, {r.retried} to retry, {r.failed} failed, "
            f"{r.in_doubt} in doubt, {r.released} released"
        )


if __name__ == "__main__":
    main()
