"""The worker process's long-lived objects, kept out of the cyclic garbage collector's passes.

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
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_running = 0  # workers inside frozen_heap(), in any thread of the process
_unfreeze_after = False  # the heap was not frozen before the first of them: unfreeze after


@contextmanager
def frozen_heap() -> Iterator[None]:
    """Freeze the heap as it is for as long as any worker of this process runs."""
    global _running, _unfreeze_after
    with _lock:
        if _running == 0:
            _unfreeze_after = gc.get_freeze_count() == 0
        _running += 1
        gc.freeze()  # a later worker freezes what was made since, too
    try:
        yield
    finally:
        with _lock:
            _running -= 1
            if _running == 0 and _unfreeze_after:
                gc.unfreeze()
