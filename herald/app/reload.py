"""Graceful reload on SIGHUP: stop as the first SIGTERM does, then re-execute the same command.

``systemctl reload`` (``ExecReload=/bin/kill -HUP $MAINPID``) must pick up a new environment
file, a new configuration and newly installed code without losing a send: the process stops
taking work, lets started sends and the pass under way finish (exactly as on SIGTERM), disposes
of its engines and then ``execv``s itself with its original command line. The pid stays the
same, so systemd keeps tracking it. A SIGTERM after the SIGHUP wins: the process stops instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import NoReturn

log = logging.getLogger("herald.service")


class ReloadRequest:
    """Whether this process was asked to re-execute itself once it has stopped."""

    def __init__(self) -> None:
        self._requested = False

    @property
    def requested(self) -> bool:
        return self._requested

    def request(self) -> bool:
        """Ask for a reload; False if one was already asked for."""
        if self._requested:
            return False
        self._requested = True
        return True

    def cancel(self) -> bool:
        """A stop signal after SIGHUP: stop for good. True if a reload was pending."""
        pending, self._requested = self._requested, False
        return pending


# One per process: the signal handlers set it, the CLI reads it once the command has stopped.
reload_request = ReloadRequest()


def on_sighup(stop: Callable[[], None], *, stopping: Callable[[], bool]) -> Callable[[], None]:
    """The SIGHUP handler: note the reload and ``stop()`` gracefully, unless already stopping
    (a SIGTERM came first: it is not turned into a restart)."""

    def handler() -> None:
        if stopping() or not reload_request.request():
            return
        log.warning(
            "reloading: finishing started work, then restarting with the same command",
            extra={"event": "reload_requested", "pid": os.getpid()},
        )
        stop()

    return handler


def install_sighup(stop: Callable[[], None], *, stopping: Callable[[], bool]) -> None:
    """Install ``on_sighup`` on the running loop (call from inside it)."""
    asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, on_sighup(stop, stopping=stopping))


@contextlib.contextmanager
def signals_before_start() -> Iterator[None]:
    """While a service waits for its database (nothing taken, nothing started): SIGHUP
    re-executes at once and SIGTERM exits 0, instead of the default of dying by the signal
    (which systemd would count as a failure)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_hup(_sig: int, _frame: FrameType | None) -> None:
        _reexec(os.execv)

    def on_term(_sig: int, _frame: FrameType | None) -> None:
        raise SystemExit(0)

    previous = {
        signal.SIGHUP: signal.signal(signal.SIGHUP, on_hup),
        signal.SIGTERM: signal.signal(signal.SIGTERM, on_term),
    }
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def command_line() -> list[str]:
    """What to ``execv``: this interpreter with the arguments it was started with (the console
    script's path or ``-m herald``, then the command and its options)."""
    return [sys.executable, *sys.orig_argv[1:]]


def reexec_if_requested(execv: Callable[[str, list[str]], object] = os.execv) -> None:
    """Re-execute the command if a SIGHUP asked for it; returns only if none did."""
    if not reload_request.requested:
        return
    _reexec(execv)


def _reexec(execv: Callable[[str, list[str]], object]) -> NoReturn:
    argv = command_line()
    log.warning("reloading: re-executing %s", " ".join(argv[1:3]), extra={"event": "reloading"})
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    execv(argv[0], argv)
    raise SystemExit(0)  # only a test's execv returns
