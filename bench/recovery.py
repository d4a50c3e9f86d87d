"""Recovery time: a worker process is SIGKILLed holding claims it never started (before T4).

1. N jobs are enqueued.
2. A child process (``python -m bench.recovery URL N LEASE``) claims all of them through the real
   ``OutboxStore.claim`` with a lease of LEASE seconds, commits, says so on stdout, and then blocks:
   a worker that died between its claim and T4.
3. The parent SIGKILLs it and starts the clock, then runs a second, real ``Worker`` configured like
   ``herald worker --until-idle`` (``herald.app.worker.WorkerOptions``: the CLI's own recovery
   interval and poll interval) with a no-op transport, until it has sent every job and stops.

The figure is the time from the kill until that second worker is done. It cannot be below the
lease left at the kill (the claim is a few milliseconds old): unstarted claims owe no recovery
grace, and the second worker times its pass to their expiry.
Target (issue 12): ≤ lease + 2 s.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench.drain import NoopTransport, bench_jobs, enqueue
from dispatch.store import OutboxStore
from dispatch.worker import Worker
from herald.app.worker import WorkerOptions
from herald.db import create_engine

REPO = Path(__file__).resolve().parent.parent
JOBS = 1_000
LEASE_SECONDS = 10.0
TARGET_SLACK_SECONDS = 2.0
CHILD_TIMEOUT_SECONDS = 60


@dataclass(frozen=True)
class RecoveryResult:
    jobs: int
    lease_seconds: float
    recovery_interval: float
    grace_seconds: float
    poll_interval: float
    seconds: float  # from SIGKILL until the second worker has sent every job
    recovered: int

    @property
    def target_seconds(self) -> float:
        return self.lease_seconds + TARGET_SLACK_SECONDS


def measure_recovery(
    url: str, jobs: int = JOBS, lease_seconds: float = LEASE_SECONDS
) -> RecoveryResult:
    engine = create_engine(url)
    try:
        if enqueue(engine, bench_jobs(jobs, campaign="bench-recovery")) != jobs:
            raise RuntimeError("enqueue did not create every job")
        killed_at = _claim_in_child_and_kill(url, jobs, lease_seconds)
        config = WorkerOptions(
            concurrency=200, lease=lease_seconds, until_idle=True, idle_horizon=0.0
        ).config()
        worker = Worker(engine, {"email": NoopTransport()}, config)
        asyncio.run(worker.run())
        seconds = time.perf_counter() - killed_at
    finally:
        engine.dispose()
    if worker.report.sent != jobs:
        raise RuntimeError(f"second worker sent {worker.report.sent} of {jobs}")
    return RecoveryResult(
        jobs=jobs,
        lease_seconds=lease_seconds,
        recovery_interval=config.recovery_interval,
        grace_seconds=config.recovery_grace_seconds,
        poll_interval=config.poll_interval,
        seconds=seconds,
        recovered=worker.report.recovered,
    )


def _claim_in_child_and_kill(url: str, jobs: int, lease_seconds: float) -> float:
    """Run the doomed claimer, SIGKILL it once it holds every claim; returns the kill's time."""
    command = [sys.executable, "-m", "bench.recovery", url, str(jobs), str(lease_seconds)]
    child = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        line = child.stdout.readline()  # the child writes one line once its claim is committed
        if not line:
            raise RuntimeError(f"claiming child exited early ({child.wait(CHILD_TIMEOUT_SECONDS)})")
        claimed = json.loads(line)["claimed"]
        if claimed != jobs:
            raise RuntimeError(f"claiming child claimed {claimed} of {jobs}")
        os.kill(child.pid, signal.SIGKILL)
        killed_at = time.perf_counter()
        child.wait(CHILD_TIMEOUT_SECONDS)
        return killed_at
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def _doomed_claimer(url: str, jobs: int, lease_seconds: float) -> None:
    """The child: claim every job, commit, report, then block before T4 until killed."""
    engine = create_engine(url)
    store = OutboxStore(engine.dialect.name)
    with engine.begin() as conn:
        claimed = store.claim(
            conn, owner=f"bench-doomed:{os.getpid()}", limit=jobs, lease_seconds=lease_seconds
        )
    print(json.dumps({"claimed": len(claimed)}), flush=True)
    signal.pause()  # never returns: SIGKILL ends the process with its claims held


if __name__ == "__main__":
    _doomed_claimer(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]))
