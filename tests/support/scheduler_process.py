"""``herald scheduler`` that pauses its first fan-out after one batch, for the tests that signal a
scheduler in the middle of a fan-out (tests/processes/test_scheduler_processes.py):

    python -m tests.support.scheduler_process DATABASE_URL [--hold]

The same loop, signal handling and log lines as ``herald scheduler`` (herald.app.scheduler's
``SchedulerService`` and ``run_scheduler``, the CLI's own ``say`` functions), plus one thing
that only exists here: after the first batch of the first fan-out has committed it says
``PAUSED`` on stderr and waits, inside the pass, until the first SIGTERM has been acknowledged
(the pass then finishes: the graceful stop under test); with ``--hold``, until the second
signal's forced exit ends the process. So the signal lands mid-fan-out for certain, with a
fan-out of a few batches: without the pause that took 10,000 recipients in two steps, and was
still a race. It listens through ``ScheduledPass.fanout_progress``, the seam the product offers
(None there); the shipped CLI has no pause and no environment variable that changes what a
scheduler does.
"""

from __future__ import annotations

import argparse
import sys
import threading

from herald.app.scheduler import SchedulerOptions, SchedulerService, run_scheduler
from herald.app.scheduler_pass import ScheduledPass
from herald.cli.scheduler import _say_pass, _say_scheduler_stopping
from herald.db import create_engine
from herald.logs import setup_logging
from scheduler.fanout import BATCH_SIZE

PAUSED = "test: paused after the first fan-out batch"
# With --hold the pass waits this long at most for the forced exit (the test's own deadline is
# shorter): a process left behind by a failed test still ends.
HOLD_AT_MOST = 600.0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.support.scheduler_process")
    parser.add_argument("database_url")
    parser.add_argument("--hold", action="store_true", help="stay paused until killed")
    args = parser.parse_args(argv)
    setup_logging("info", "text")
    stopping = threading.Event()  # set when the first SIGTERM is handled
    batches = 0

    def after_batch(_jobs: int) -> None:  # in the pass's thread, after the batch committed
        nonlocal batches
        batches += 1
        if batches != 1:
            return
        sys.stderr.write(PAUSED + "\n")
        sys.stderr.flush()
        if args.hold:
            threading.Event().wait(HOLD_AT_MOST)
        else:
            stopping.wait()

    def on_stopping() -> None:
        _say_scheduler_stopping()
        stopping.set()

    engine = create_engine(args.database_url)
    service = SchedulerService(
        engine,
        options=SchedulerOptions(tick=30.0),
        say=_say_pass,
        # scheduler.fanout.BATCH_SIZE on both databases: the tests count on a few batches per
        # step (PostgreSQL's own default of 5,000 would fan a step out in one).
        run_pass=ScheduledPass(fanout_progress=after_batch, batch_size=BATCH_SIZE),
    )
    try:
        totals = run_scheduler(service, handle_signals=True, on_stopping=on_stopping)
    finally:
        engine.dispose()
    print(f"scheduler done: {totals.passes} pass(es), {totals.busy_passes} fired something")


if __name__ == "__main__":
    main()
