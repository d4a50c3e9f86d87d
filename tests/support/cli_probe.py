"""Run a small Python script that drives herald's CLI in a fresh interpreter, and read what it
wrote on stderr: for tests that inspect the process itself (what it imported, the collector's
state) rather than the command's output."""

from __future__ import annotations

import os
import subprocess
import sys


def probe_stderr(script: str, *args: str, database_url: str = "sqlite://") -> str:
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HERALD_DATABASE_URL": database_url},
        check=True,
    )
    return done.stderr
