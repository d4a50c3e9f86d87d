"""A worker's drain leaves the cyclic garbage collector's young generation alone
(``dispatch.heap``): the jobs it holds live for a few transactions and are freed by their
reference counts, so collections during the drain only walk them and free nothing, holding the
GIL the database threads wait for. A real worker drains a real outbox with a no-op transport,
and the collections of the young generation are counted as they happen (``gc.callbacks``):
with CPython's default threshold, 4,000 jobs at concurrency 200 took 99–121 of them, now 1."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy.engine import Engine

from bench.drain import NoopTransport, bench_jobs, drain_config, enqueue
from dispatch.worker import Worker

JOBS = 4_000
MOST_COLLECTIONS = 20  # of the young generation during the drain; 99–121 before


@pytest.fixture
def young_collections() -> Iterator[list[int]]:
    """Appends to the list the number of objects each young-generation collection freed."""
    freed: list[int] = []

    def note(phase: str, info: dict[str, Any]) -> None:
        if phase == "stop" and info["generation"] == 0:
            freed.append(info["collected"])

    gc.callbacks.append(note)
    try:
        yield freed
    finally:
        gc.callbacks.remove(note)


def test_a_drain_leaves_the_young_generation_alone(
    engine: Engine, young_collections: list[int]
) -> None:
    assert enqueue(engine, bench_jobs(JOBS)) == JOBS
    worker = Worker(engine, {"email": NoopTransport()}, drain_config(200))
    young_collections.clear()  # the enqueue's do not count
    report = asyncio.run(worker.run())
    assert report.sent == JOBS
    assert len(young_collections) <= MOST_COLLECTIONS, young_collections
    assert gc.get_threshold()[0] < 1_000  # the process's own again after the worker
