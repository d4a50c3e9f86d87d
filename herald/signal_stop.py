"""A stop request that a signal handler can make.

A Python signal handler runs in the main thread between two bytecodes, wherever that thread
is, including inside ``threading.Event.wait``'s own lock: an ``Event.set()`` in the handler
then waits for a lock its own thread holds, for ever (Ctrl-C once hung ``herald status
--watch`` that way). ``SignalStop.set`` takes no lock: it sets a flag and writes a byte to a
pipe, which ``wait`` selects on.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import threading
import time
from collections.abc import Iterator

# How long a wait may go without giving Python's signal handlers a chance to run (``wait``).
HANDLER_TICK = 0.2


class SignalStop:
    def __init__(self) -> None:
        self._set = False
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)

    def set(self) -> None:
        """Safe in a signal handler: no lock, no allocation that could wait."""
        self._set = True
        with contextlib.suppress(BlockingIOError):  # the pipe already holds a wake-up
            os.write(self._write, b"x")

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout: float | None = None) -> bool:
        """Until set or ``timeout`` seconds have passed; whether it is set.

        The wait wakes every ``HANDLER_TICK`` seconds. The kernel may deliver a signal to any
        thread of the process (the sink has three). Only the main thread runs Python's handler,
        and only once it runs bytecode again: a ``select`` with no timeout there would sleep
        through a signal another thread took. A stopped ``herald sink`` once waited out a
        test's 60 s that way (tests/unit/test_signal_stop.py).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._set:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                break
            tick = HANDLER_TICK if remaining is None else min(remaining, HANDLER_TICK)
            select.select([self._read], [], [], tick)  # the handler writes to the pipe
        return self._set

    def close(self) -> None:
        for fd in (self._read, self._write):
            with contextlib.suppress(OSError):
                os.close(fd)


@contextlib.contextmanager
def signal_sets(signum: signal.Signals, stop: SignalStop) -> Iterator[None]:
    """While the ``with`` lasts, ``signum`` sets ``stop`` (the previous handler is put back
    after). Only the main thread can install a handler: elsewhere nothing changes, and the
    signal keeps its meaning (KeyboardInterrupt for SIGINT, the default for SIGTERM)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signum, lambda _signum, _frame: stop.set())
    try:
        yield
    finally:
        signal.signal(signum, previous)
