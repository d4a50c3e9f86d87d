"""Use case ``run_all`` (``herald run``): scheduler, worker and recovery in one process.

For a single machine on the embedded default (SQLite): one event loop runs the scheduler's
loop (herald.app.scheduler) and a worker (herald.app.worker, whose recovery passes run inside
it). Nothing is shared but the database, exactly as when they run as separate processes, so
the same guarantees hold; the separate commands remain for scaling out.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from dispatch.transport import TransportConfigError
from dispatch.worker import Worker, WorkerReport
from herald.app.scheduler import SchedulerService, SchedulerTotals, stop_on_signals
from herald.errors import ConfigError


@dataclass(frozen=True)
class RunReport:
    worker: WorkerReport
    scheduler: SchedulerTotals

    def as_dict(self) -> dict[str, dict[str, int]]:
        return {"worker": self.worker.as_dict(), "scheduler": self.scheduler.as_dict()}


def run_all(
    worker: Worker,
    service: SchedulerService,
    *,
    handle_signals: bool = False,
    on_stopping: Callable[[], None] | None = None,
) -> RunReport:
    """Run both until stopped (a signal with ``handle_signals``), or until either ends.

    A worker that stops on its own (an unusable SMTP setting) stops the scheduler too: a
    machine that fires but cannot send would only pile up work. ConfigError for that setting.
    """
    try:
        return asyncio.run(_together(worker, service, handle_signals, on_stopping))
    except TransportConfigError as exc:
        raise ConfigError(exc.message, hint=exc.hint) from None


async def _together(
    worker: Worker,
    service: SchedulerService,
    handle_signals: bool,
    on_stopping: Callable[[], None] | None,
) -> RunReport:
    def stop_both() -> None:
        service.stop()
        worker.stop()

    if handle_signals:

        def first_signal() -> None:
            if on_stopping is not None:
                on_stopping()
            stop_both()

        stop_on_signals(first_signal)
    scheduling = asyncio.create_task(service.run(), name="scheduler")
    sending = asyncio.create_task(worker.run(), name="worker")
    try:
        await asyncio.wait({scheduling, sending}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop_both()
        # Both finish what they started: the pass under way, the sends inside DATA.
        await asyncio.wait({scheduling, sending})
    totals = scheduling.result()
    return RunReport(sending.result(), totals)  # the worker's TransportConfigError, if any
