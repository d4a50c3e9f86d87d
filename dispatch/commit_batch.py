"""The group committer's requests in flight: a queued request with the future it answers
(``Pending``), how large a batch of them is, how a batch is split, and how its results get
back to the event loops that wait for them (``dispatch/committer.py``)."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any

from dispatch.commit_requests import OutboxRequest

# Requests a batch needs before its T4s get a transaction of their own ("Sends on the wire
# first"): a second transaction costs two round trips and a WAL flush, more than running a few
# requests beside the others saves (measured: splitting every batch cost the SMTP bench,
# concurrency 50, about 7 % in five pairs; from 64 on, no cost there, the drain's gain kept).
SPLIT_AT = 64


@dataclass
class Pending:
    """A request waiting in the queue, and where to deliver its result."""

    request: OutboxRequest[Any]
    future: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop


def touches_fewer(batch: list[Pending], rows: int) -> bool:
    """Whether ``batch`` touches fewer than ``rows`` jobs' rows (``OutboxRequest.rows``); reads
    no further than that many, so a drain's batch of hundreds costs a few calls."""
    for pending in batch:
        if rows <= 0:
            return False
        rows -= pending.request.rows()
    return rows > 0


class Whole(list[Pending]):
    """Requests put back after a split (``urgent_first``): executed as they come, not split
    again."""


def urgent_first(batch: list[Pending]) -> tuple[list[Pending], Whole | None]:
    """The batch's urgent requests to run now and the rest to put back, when it holds both
    and is worth two transactions (``SPLIT_AT``); else the batch whole and nothing."""
    if len(batch) < SPLIT_AT:
        return batch, None
    urgent = [pending for pending in batch if pending.request.urgent]
    if not urgent or len(urgent) == len(batch):
        return batch, None
    return urgent, Whole(pending for pending in batch if not pending.request.urgent)


def resolve_failed(pending: Pending, *, exc: BaseException) -> None:
    def settle() -> None:
        if not pending.future.done():  # else the waiter was cancelled
            pending.future.set_exception(exc)

    # RuntimeError: the loop is closed, so nobody is waiting any more.
    with contextlib.suppress(RuntimeError):
        pending.loop.call_soon_threadsafe(settle)


def resolve_all(batch: list[Pending], results: list[Any]) -> None:
    """One wake-up per event loop for the whole batch, not one per request."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[Pending, Any]]] = {}
    for pending, result in zip(batch, results, strict=True):
        by_loop.setdefault(pending.loop, []).append((pending, result))

    def settle(pairs: list[tuple[Pending, Any]]) -> None:
        for pending, result in pairs:
            if not pending.future.done():  # the waiter was cancelled
                pending.future.set_result(result)

    for loop, pairs in by_loop.items():
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(settle, pairs)
