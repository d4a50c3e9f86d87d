"""Scraping Prometheus metrics from a real Herald process (``--metrics-port 0``).

``metrics_process`` starts a long-running command with ``--metrics-port 0`` and reads the
start-up line that names the bound port from stderr (with a deadline, never a sleep);
``scrape`` parses the text exposition with prometheus_client's own parser, so a malformed
exposition fails the test; ``wait_for`` polls with a deadline.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from tests.support.paths import HERALD

STARTED = re.compile(r"herald \w+: metrics on http://127\.0\.0\.1:(\d+)/metrics")

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Scrape:
    """One scrape: every sample by (name, sorted labels), and each family's type."""

    samples: dict[tuple[str, Labels], float]
    types: dict[str, str]

    def value(self, name: str, **labels: str) -> float | None:
        return self.samples.get((name, tuple(sorted(labels.items()))))

    def values(self, name: str) -> dict[Labels, float]:
        return {labels: v for (n, labels), v in self.samples.items() if n == name}


def parse(text: str) -> Scrape:
    samples: dict[tuple[str, Labels], float] = {}
    types: dict[str, str] = {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return Scrape(samples, types)


def scrape(url: str, timeout: float = 10.0) -> Scrape:
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 (loopback)
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        return parse(response.read().decode())


def wait_for(check: Callable[[], Scrape | None], what: str, timeout: float = 60.0) -> Scrape:
    """Call ``check`` until it returns a scrape (not None); fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found is not None:
            return found
        assert time.monotonic() < deadline, f"not seen within {timeout:.0f}s: {what}"
        time.sleep(0.1)  # the polling cadence, not a verdict


@dataclass
class MetricsProcess:
    process: subprocess.Popen[str]
    url: str = ""
    lines: list[str] = field(default_factory=list)
    _queue: queue.Queue[str | None] = field(default_factory=queue.Queue)

    def scrape(self) -> Scrape:
        return scrape(self.url)

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM (graceful) and the exit code; the rest of stderr is kept in ``lines``."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout=timeout)
        self._drain(timeout=5.0)
        return code

    def stderr(self) -> str:
        return "".join(self.lines)

    def _drain(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return
            if line is None:
                return
            self.lines.append(line)


@contextmanager
def metrics_process(
    args: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    via_env: bool = False,
    timeout: float = 30.0,
) -> Iterator[MetricsProcess]:
    """``herald <args> --metrics-port 0`` running, its metrics URL known (``via_env``: the
    port given as ``HERALD_METRICS_PORT=0`` instead of the option)."""
    settings = {"HERALD_METRICS_PORT": "0"} if via_env else {}
    option = [] if via_env else ["--metrics-port", "0"]
    process = subprocess.Popen(
        [str(HERALD), *args, *option],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("HERALD_")}
        | settings
        | (env or {}),
    )
    running = MetricsProcess(process)

    def read() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            running._queue.put(line)
        running._queue.put(None)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + timeout
        while not running.url:
            line = running._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            if line is None:
                raise AssertionError(f"herald exited before serving metrics: {running.stderr()}")
            running.lines.append(line)
            if found := STARTED.search(line):
                running.url = f"http://127.0.0.1:{found[1]}/metrics"
        yield running
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=15)
        reader.join(timeout=5)
        assert process.stderr is not None
        process.stderr.close()
    assert "Traceback" not in running.stderr(), running.stderr()
