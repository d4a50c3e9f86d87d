"""herald.signal_stop: a stop a signal handler can request while the main thread waits on it.

``threading.Event.set`` in a handler deadlocks when the signal lands while the main thread is
inside ``Event.wait``'s own lock (shown below with the lock held on purpose); ``SignalStop``
takes no lock, so its ``set`` returns wherever the main thread was.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from herald.signal_stop import SignalStop, signal_sets


def test_an_event_set_from_inside_its_own_lock_would_wait_for_ever() -> None:
    """Why not Event: the handler runs in the thread that holds the Event's lock."""
    event = threading.Event()
    with event._cond:  # type: ignore[attr-defined]  # where Event.wait is between two bytecodes
        assert not event._cond._lock.acquire(timeout=0.05)  # type: ignore[attr-defined]


def test_set_never_takes_a_lock_the_waiting_thread_could_hold() -> None:
    stop = SignalStop()
    try:
        started = time.monotonic()
        for _ in range(10_000):  # a full pipe is fine: one byte is enough to wake a wait
            stop.set()
        assert stop.is_set()
        assert stop.wait(0)
        assert stop.wait(None)
        assert time.monotonic() - started < 5
    finally:
        stop.close()


@settings(max_examples=25, deadline=None)
@given(delay=st.floats(min_value=0.0, max_value=0.02))
def test_a_signal_during_wait_ends_it_promptly(delay: float) -> None:
    _ends_the_wait_promptly(threading.Timer(delay, os.kill, (os.getpid(), signal.SIGUSR1)))


def _ends_the_wait_promptly(timer: threading.Timer) -> None:
    """``timer`` sends SIGUSR1 while the main thread waits on a stop the signal sets."""
    if threading.current_thread() is not threading.main_thread():
        pytest.fail("signal handlers need the main thread")
    stop = SignalStop()
    try:
        with signal_sets(signal.SIGUSR1, stop):
            started = time.monotonic()
            timer.start()
            assert stop.wait(60)
            assert time.monotonic() - started < 30
    finally:
        timer.cancel()
        stop.close()


def test_wait_times_out_unset() -> None:
    stop = SignalStop()
    try:
        assert stop.wait(0.01) is False
        assert not stop.is_set()
    finally:
        stop.close()


def test_signal_sets_installs_and_puts_back_the_handler() -> None:
    stop = SignalStop()
    before = signal.getsignal(signal.SIGTERM)
    try:
        with signal_sets(signal.SIGTERM, stop):
            assert signal.getsignal(signal.SIGTERM) is not before
            os.kill(os.getpid(), signal.SIGTERM)  # handled between two bytecodes, in this thread
            assert stop.wait(timeout=10)
        assert signal.getsignal(signal.SIGTERM) is before
    finally:
        stop.close()


def test_signal_sets_changes_nothing_off_the_main_thread() -> None:
    stop = SignalStop()
    seen: list[object] = []

    def elsewhere() -> None:
        with signal_sets(signal.SIGINT, stop):
            seen.append(signal.getsignal(signal.SIGINT))

    try:
        thread = threading.Thread(target=elsewhere)
        thread.start()
        thread.join(timeout=30)
        assert seen == [signal.getsignal(signal.SIGINT)]  # nothing installed, nothing raised
        assert not stop.is_set()
    finally:
        stop.close()


def test_a_signal_another_thread_takes_still_ends_the_wait() -> None:
    """The kernel may hand a process's signal to any of its threads. Python runs the handler in
    the main thread, but only when that thread runs bytecode again: a main thread asleep in
    ``select`` with no timeout slept through it (a stopped ``herald sink`` waited out a test's
    60 s). The signal goes to another thread here on purpose."""
    parked = threading.Event()
    other = threading.Thread(target=parked.wait, args=(60,), daemon=True)
    other.start()
    assert other.ident is not None
    try:
        _ends_the_wait_promptly(
            threading.Timer(0.05, signal.pthread_kill, (other.ident, signal.SIGUSR1))
        )
    finally:
        parked.set()
