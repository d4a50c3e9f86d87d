"""The cyclic garbage collector while a worker runs: long-lived objects kept out of its passes,
and its young generation collected seldom.

When a worker starts, the process already holds tens of thousands of objects that live as long
as it does: modules, SQLAlchemy's tables and compiled statements, the configuration (about
80,000 in the drain benchmark). CPython's full collection (generation 2) walks all of them,
and the drain's steady allocation of short-lived containers (tasks, futures, requests) triggers
one every few thousand jobs: 9.6 µs of the loop thread's CPU per job in a 10,000-job drain, about
an eighth of it (gc.callbacks timing, issue 12). ``gc.freeze()`` moves what exists into the
permanent generation, which no collection visits; new objects are collected as before.

Frozen objects that are already garbage (a cycle nobody has collected yet) wait until the last
running worker ends: ``gc.unfreeze()`` then hands everything back to the oldest generation, so a
process that runs workers one after another (the test suite) keeps nothing for good. Unless the
heap was already frozen when the first worker started: ``herald``'s command line freezes what
its start-up made for the life of the process (herald/cli/startup.py), and unfreezing would
undo that; what the worker froze besides (the engine, the configuration) lives as long anyway.

The young generation. CPython collects it whenever the containers allocated since the last
collection outnumber those freed by 700. A worker holds hundreds of jobs at once, each with a
task, futures, requests and rows that live for a few transactions and are then freed by their
reference counts, not by the collector: in a 10,000-job drain, about 340 young and 30 middle
collections walked them and freed nothing, 45–50 ms of a 650 ms drain, all of it holding the
GIL that the database threads wait for (bench/profiles/drain-cpu.md, session 32). While a worker
runs the threshold is ``YOUNG_THRESHOLD`` (2–4 collections in such a drain), and it is the
process's own again after the last one ends. Cyclic garbage waits longer for its collection, at
most that many containers' worth: a drain's sends leave none, and the SMTP path's few cycles
(its connections, at the pool's end) hold no message.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

# Containers allocated (less those freed) between two collections of the young generation while
# a worker runs; CPython's default is 700. Measured in 8 interleaved 10,000-job drains: 16,028
# jobs/s median at 20,000 and 15,537 at 50,000, against 14,368 at 700.
YOUNG_THRESHOLD = 20_000

_lock = threading.Lock()
_running = 0  # workers inside frozen_heap(), in any thread of the process
_unfreeze_after = False  # the heap was not frozen before the first of them: unfreeze after
_process_threshold: tuple[int, int, int] = gc.get_threshold()  # restored after the last worker


@contextmanager
def frozen_heap() -> Iterator[None]:
    """Freeze the heap as it is, and collect its young generation seldom, for as long as any
    worker of this process runs."""
    global _running, _unfreeze_after, _process_threshold
    with _lock:
        if _running == 0:
            _unfreeze_after = gc.get_freeze_count() == 0
            _process_threshold = gc.get_threshold()
            young, middle, old = _process_threshold
            if young:  # 0: the process turned automatic collection off; it stays off
                gc.set_threshold(max(young, YOUNG_THRESHOLD), middle, old)
        _running += 1
        gc.freeze()  # a later worker freezes what was made since, too
    try:
        yield
    finally:
        with _lock:
            _running -= 1
            if _running == 0:
                gc.set_threshold(*_process_threshold)
                if _unfreeze_after:
                    gc.unfreeze()
