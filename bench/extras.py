"""Install the comparison libraries (pgqueuer, procrastinate) into the running venv on first use.

They are not Herald dependencies. pip is told to keep every distribution already installed at
its current version (a constraints file from the venv itself), so installing a comparison can
never upgrade psycopg or SQLAlchemy under Herald; if that cannot be satisfied, the comparison
is reported as not measured instead.
"""

from __future__ import annotations

import importlib
import importlib.util
import subprocess
import sys
import tempfile
from importlib.metadata import PackageNotFoundError, distributions, version

PIP_TIMEOUT_SECONDS = 240


class NotMeasured(Exception):
    """A comparison could not be installed or run; the message says why."""


def _pinned_constraints() -> str:
    pins = sorted(
        f"{d.metadata['Name']}=={d.version}"
        for d in distributions()
        if d.metadata["Name"] and not d.metadata["Name"].lower().startswith(("pip", "herald"))
    )
    return "\n".join(pins) + "\n"


def ensure_installed(modules: dict[str, str]) -> None:
    """``modules``: import name → pip requirement. Installs the missing ones or raises."""
    missing = [req for name, req in modules.items() if importlib.util.find_spec(name) is None]
    if not missing:
        return
    print(
        f"  installing {', '.join(missing)} into {sys.prefix} (first run; not a Herald dependency)"
    )
    with tempfile.NamedTemporaryFile("w", suffix=".txt", prefix="bench-pins-") as pins:
        pins.write(_pinned_constraints())
        pins.flush()
        command = [sys.executable, "-m", "pip", "install", "--quiet", "-c", pins.name, *missing]
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=PIP_TIMEOUT_SECONDS, check=False
            )
        except subprocess.TimeoutExpired as exc:
            raise NotMeasured(f"pip install timed out after {PIP_TIMEOUT_SECONDS} s") from exc
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise NotMeasured(f"pip install {' '.join(missing)} failed: {last}")
    importlib.invalidate_caches()


def package_version(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return "?"
