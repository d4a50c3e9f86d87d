"""herald/cli/startup.py: ``herald`` pauses the garbage collector while a command starts, and
collects again (start-up's objects frozen) once the command begins its work; importing
``herald.cli`` changes nothing. The time it saves is measured by ``make bench``, not here."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.cli_probe import probe_stderr

# Runs `herald ARGS` through main() as the console script does, with the collector's state
# seen by the status use case (the command's work) and after main() returned.
PROBE = """
import gc, sys
import herald.app.status as use_case
seen = []
real = use_case.status
def status(*args, **kwargs):
    seen.append(f"work enabled={gc.isenabled()} frozen={gc.get_freeze_count() > 0}")
    return real(*args, **kwargs)
use_case.status = status
sys.argv = ["herald", *sys.argv[1:]]
from herald.cli import main
try:
    main()
except SystemExit:
    pass
seen.append(f"after enabled={gc.isenabled()}")
print("\\n".join(seen), file=sys.stderr)
"""


def probe(*args: str, database_url: str = "sqlite://") -> list[str]:
    return probe_stderr(PROBE, *args, database_url=database_url).splitlines()[-2:]


def test_a_command_works_and_ends_with_the_collector_on(
    sqlite_template: Path, tmp_path: Path
) -> None:
    database = tmp_path / "herald.db"
    shutil.copy(sqlite_template, database)
    assert probe("status", database_url=f"sqlite:///{database}") == [
        "work enabled=True frozen=True",
        "after enabled=True",
    ]


def test_a_command_that_never_starts_work_ends_with_the_collector_on() -> None:
    assert probe("status", "--help")[-1] == "after enabled=True"
    assert probe("status", "--no-such-option")[-1] == "after enabled=True"


def test_importing_the_cli_leaves_the_collector_alone() -> None:
    code = (
        "import gc; from herald.cli import app; import herald.cli.base; "
        "print(gc.isenabled(), gc.get_freeze_count())"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.split() == ["True", "0"]
