"""A drip campaign's launch and scheduler passes (information; issue 12, session 39).

A two-step enrollment campaign over an N-row CSV is launched as ``herald launch`` does
(``herald.app.launch``: the check, the campaign stored, its first pass: everyone enrolled and
step 1 composed for each), then passed over as a running ``herald scheduler`` would:

- an idle pass in a new process (no ``PassState``: the CSV is read again), every drip waiting
  for its step 1 to be sent;
- an idle pass of a running scheduler (the CSV unchanged since its last pass: not read);
- a pass once every step 1 has been sent: step 2 composed for everyone.

The passes compose with one process per core, as ``herald scheduler``'s do
(``scheduler.drip_pool``; the launch's own pass too, as ``herald launch``'s). Before session 41
they composed in the pass's process.

A pass's cost should follow the work that is due, not the number of drips waiting
(bench/profiles/fanout.md, session 39).
"""

from __future__ import annotations

import csv
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy as sa

from dispatch.models import send_job
from herald.app.launch import launch
from herald.db import create_engine
from scheduler.check_pool import CheckPool, pool_of
from scheduler.passes import PassState, run_pass

LAUNCH_AT = datetime(2026, 1, 6, 10, 0, tzinfo=UTC)
SENT_AT = LAUNCH_AT + timedelta(minutes=5)
CAMPAIGN = """\
name: {name}
from: "Herald Bench <news@herald.test>"
enrollment: audience
audience: people.csv
steps:
  - id: welcome
    subject: "Welcome {{{{ name }}}}"
    text: "Hi {{{{ name }}}}, welcome aboard."
  - id: tips
    after: 2d
    subject: "Tips for {{{{ name }}}}"
    text: "Three things to try this week."
"""


@dataclass(frozen=True)
class DripFigures:
    recipients: int
    launch_seconds: float
    idle_pass_seconds: float  # a new process: the CSV read again
    idle_pass_unchanged_seconds: float  # a running scheduler, the CSV unchanged
    due_pass_seconds: float  # every step 1 sent: step 2 for everyone
    step_two_jobs: int


def write_drip(folder: Path, recipients: int, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "people.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["email", "name"])
        for i in range(recipients):
            writer.writerow([f"user{i:07d}@example.com", f"User {i}"])
    path = folder / "campaign.yaml"
    path.write_text(CAMPAIGN.format(name=name))
    return path


def measure_drip(
    url: str, path: Path, recipients: int, pool: CheckPool | None = None
) -> DripFigures:
    """``pool``: the passes' (None: one per core, as ``herald scheduler`` has)."""
    pool = pool if pool is not None else pool_of()
    engine = create_engine(url)
    try:
        started = time.perf_counter()
        launch(engine, path, clock=lambda: LAUNCH_AT, actor="bench")
        launched = time.perf_counter() - started

        def timed_pass(minutes: int, state: PassState | None) -> tuple[float, int]:
            at = LAUNCH_AT + timedelta(minutes=minutes)
            began = time.perf_counter()
            report = run_pass(engine, now=at, actor="bench", state=state, pool=pool)
            return time.perf_counter() - began, report.new_jobs

        idle, idle_jobs = timed_pass(1, None)
        running = PassState()
        timed_pass(2, running)  # its first pass reads the CSV, as any new process's does
        unchanged, unchanged_jobs = timed_pass(3, running)
        if idle_jobs or unchanged_jobs:
            raise RuntimeError(f"idle passes composed {idle_jobs} and {unchanged_jobs} jobs")
        # Every step 1 sent, as a worker would have recorded it (outcome_at is the database's
        # clock on PostgreSQL; here a moment the drip plans step 2 from).
        with engine.begin() as conn:
            conn.execute(sa.update(send_job).values(state="sent", outcome_at=SENT_AT))
        due, created = timed_pass(10, running)
    finally:
        engine.dispose()
    if created != recipients:
        raise RuntimeError(f"the due pass composed {created} step-2 jobs of {recipients}")
    return DripFigures(recipients, launched, idle, unchanged, due, created)
