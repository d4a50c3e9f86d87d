"""Start-up time of the ``herald`` command: ``herald --help`` and ``herald status``.

Each is run N times as a fresh process (the installed console script, as an operator runs it);
the median wall time is the figure. ``status`` runs against an empty SQLite database that is
already migrated, so what is measured is imports, option parsing, the schema check and one
query, not a migration. Targets (issue 8): ``--help`` ≤ 0.3 s, ``status`` ≤ 0.6 s; they are
printed next to the figures, not asserted: wall time on a shared machine is not a test.

Each run's CPU time (user + system, the child's own) is kept too and printed beside the wall
time: on a shared machine it moves much less than wall time does. When one regresses,
``HERALD_DATABASE_URL=sqlite:///herald.db python -X importtime -c "import sys; from herald.cli
import main; sys.argv[1:] = ['status']; main()"`` shows where the import time goes (a command
imports what it needs when it runs, so importing ``herald.cli`` alone shows little), and
tests/unit/test_cli_imports.py says what each command must not import.
"""

from __future__ import annotations

import compileall
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from herald.db import create_engine
from herald.schema import upgrade

RUNS = 7
# Herald's own packages, byte-compiled before timing as `pip install` does for an installed
# package: an editable checkout under PYTHONDONTWRITEBYTECODE=1 (set on these machines) would
# otherwise recompile every module from source on every run and time the compiler.
PACKAGES = ("herald", "dispatch", "campaigns", "scheduler", "templates", "dbtypes")
ROOT = Path(__file__).resolve().parent.parent
TARGETS = {"--help": 0.3, "status": 0.6}


@dataclass(frozen=True)
class Startup:
    command: str
    times: tuple[float, ...]  # wall time of every measured run
    target_seconds: float
    cpu_times: tuple[float, ...] = ()  # the same runs' CPU time (user + system)

    @property
    def median_seconds(self) -> float:
        return statistics.median(self.times)

    @property
    def runs(self) -> int:
        return len(self.times)


def herald_executable() -> str:
    """The console script beside this interpreter (the venv's ``herald``)."""
    script = Path(sys.executable).with_name("herald")
    if not script.exists():
        raise RuntimeError(f"{script} not found: install Herald in this environment")
    return str(script)


def _time_once(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU time of one run of ``argv`` (CPU: what the waited-for child used)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def byte_compile() -> None:
    for package in PACKAGES:
        path = ROOT / package
        if path.is_dir():
            compileall.compile_dir(str(path), quiet=1)
        elif path.with_suffix(".py").exists():
            compileall.compile_file(str(path.with_suffix(".py")), quiet=1)


def measure(runs: int = RUNS) -> list[Startup]:
    herald = herald_executable()
    byte_compile()
    results = []
    with tempfile.TemporaryDirectory(prefix="herald-bench-startup-") as folder:
        url = f"sqlite:///{Path(folder) / 'herald.db'}"
        engine = create_engine(url)
        try:
            upgrade(engine)
        finally:
            engine.dispose()
        env = {**os.environ, "HERALD_DATABASE_URL": url}
        for command in TARGETS:
            argv = [herald, command]
            _time_once(argv, env)  # warm the file cache: the figure is start-up, not disk
            measured = [_time_once(argv, env) for _ in range(runs)]
            walls = tuple(wall for wall, _ in measured)
            cpus = tuple(cpu for _, cpu in measured)
            results.append(Startup(command, walls, TARGETS[command], cpus))
    return results


if __name__ == "__main__":
    for result in measure():
        print(
            f"herald {result.command}: median {result.median_seconds:.3f} s of {result.runs} "
            f"runs ({min(result.times):.3f}–{max(result.times):.3f}; "
            f"target ≤ {result.target_seconds} s); CPU median "
            f"{statistics.median(result.cpu_times):.3f} s"
        )
