"""A long-running ``herald`` command (worker, scheduler, run, serve) as a real process whose
stderr is collected line by line in a thread, so a test waits for a line with a deadline."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence

from tests.support.paths import HERALD


class ServiceProcess:
    def __init__(self, args: Sequence[str], env: dict[str, str] | None = None) -> None:
        self.process = subprocess.Popen(
            [str(HERALD), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env or {k: v for k, v in os.environ.items() if not k.startswith("HERALD_")},
        )
        self.stderr_lines: list[str] = []
        self.stdout_lines: list[str] = []
        self._readers = [
            threading.Thread(target=self._read, args=(self.process.stderr, self.stderr_lines)),
            threading.Thread(target=self._read, args=(self.process.stdout, self.stdout_lines)),
        ]
        for reader in self._readers:
            reader.daemon = True
            reader.start()

    @staticmethod
    def _read(stream: object, into: list[str]) -> None:
        for line in stream:  # type: ignore[attr-defined]
            into.append(line.rstrip("\n"))

    @property
    def pid(self) -> int:
        return self.process.pid

    def lines_with(self, text: str) -> list[str]:
        return [line for line in list(self.stderr_lines) if text in line]

    def wait_for_line(self, text: str, *, count: int = 1, timeout: float = 30.0) -> list[str]:
        wait_until(
            lambda: len(self.lines_with(text)) >= count or self.process.poll() is not None,
            timeout=timeout,
            what=f"{count} stderr line(s) with {text!r}; stderr so far: {self.stderr_lines}",
        )
        found = self.lines_with(text)
        assert len(found) >= count, f"exited {self.process.returncode}: {self.stderr_lines}"
        return found

    def signal(self, sig: signal.Signals) -> None:
        self.process.send_signal(sig)

    def finish(self, timeout: float = 60.0) -> int:
        """Wait for the exit (after a signal or on its own); the exit status."""
        code = self.process.wait(timeout=timeout)
        for reader in self._readers:
            reader.join(timeout=5)
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()
        return code

    def stop(self) -> int:
        if self.process.poll() is None:
            self.signal(signal.SIGTERM)
        try:
            return self.finish(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.finish()


def wait_until(condition: Callable[[], bool], *, timeout: float, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.02)
    raise AssertionError(f"not reached within {timeout} s: {what}")
