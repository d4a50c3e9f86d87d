"""The CLI package: every command known by importing ``herald.cli`` alone (its module imported
when it runs: herald/cli/registry.py), and the libraries a command needs are not imported until
it runs (what keeps ``herald --help`` fast; the start-up time itself is measured by ``make
bench``, not asserted; tests/unit/test_cli_imports.py says what each command imports)."""

from __future__ import annotations

import subprocess
import sys

from herald.schema import HEAD_REVISION, head_revision

HEAVY = ["sqlalchemy", "jinja2", "aiosmtplib", "httpx", "pydantic", "alembic", "sqlmodel"]
COMMANDS = [
    "validate",
    "launch",
    "worker",
    "status",
    "pause",
    "resume",
    "cancel",
    "recover",
    "schedule",
    "plan",
    "simulate",
]
GROUPS = ["in-doubt", "dead", "audience", "db", "suppress", "dkim"]


def run_python(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    return done.stdout.strip()


def test_importing_the_cli_imports_no_heavy_library() -> None:
    loaded = run_python(
        f"import sys, herald.cli; print(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    assert loaded == ""


def test_every_command_is_registered_by_importing_herald_cli() -> None:
    names = run_python(
        "import typer.main, herald.cli; "
        "group = typer.main.get_command(herald.cli.app); print(' '.join(group.commands))"
    ).split()
    assert set(COMMANDS + GROUPS + ["sink"]) <= set(names)


def test_the_schema_shortcut_knows_the_newest_migration() -> None:
    assert head_revision() == HEAD_REVISION
