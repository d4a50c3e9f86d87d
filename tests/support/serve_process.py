"""``herald serve`` as a real process on 127.0.0.1, on a port it picks (``--port 0``).

The start-up line names the port; it is read from stderr with a deadline, never a sleep.
"""

from __future__ import annotations

import os
import queue
import re
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

from tests.support.paths import HERALD

STARTED = re.compile(r"herald serve: listening on http://127\.0\.0\.1:(\d+)")
SMTP_STARTED = re.compile(r"herald serve: inbound SMTP on 127\.0\.0\.1:(\d+)")


def herald_env(settings: Mapping[str, str]) -> dict[str, str]:
    """This environment without any HERALD_* setting of the caller's, plus ``settings``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERALD_")}
    return {**env, **settings}


@dataclass
class Served:
    base_url: str
    process: subprocess.Popen[str]
    smtp_port: int | None = None  # the inbound listener's, when started with --smtp-port 0
    lines: list[str] = field(default_factory=list)  # stderr so far


@contextmanager
def herald_serve(
    db_url: str,
    settings: Mapping[str, str],
    *,
    timeout: float = 30.0,
    inbound_smtp: bool = False,
) -> Iterator[Served]:
    extra = ["--smtp-host", "127.0.0.1", "--smtp-port", "0"] if inbound_smtp else []
    process = subprocess.Popen(
        [
            str(HERALD),
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--database-url",
            db_url,
            *extra,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=herald_env(settings),
    )
    assert process.stderr is not None
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            lines.put(line)
        lines.put(None)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    served = Served("", process)
    deadline = time.monotonic() + timeout
    try:
        while not served.base_url or (inbound_smtp and served.smtp_port is None):
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            if line is None:
                raise AssertionError(f"herald serve exited: {''.join(served.lines)}")
            served.lines.append(line)
            if found := STARTED.search(line):
                served.base_url = f"http://127.0.0.1:{found[1]}"
            if found := SMTP_STARTED.search(line):
                served.smtp_port = int(found[1])
        yield served
    finally:
        process.terminate()
        process.wait(timeout=15)
        reader.join(timeout=5)
        process.stderr.close()
        while not lines.empty():
            line = lines.get()
            if line is not None:
                served.lines.append(line)
    assert "Traceback" not in "".join(served.lines), "".join(served.lines)
