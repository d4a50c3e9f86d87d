"""What ``herald --help``, ``herald status --help`` and ``herald status`` import: none of the
libraries they do not use (the start-up time itself is measured by ``make bench``, not here).
Rich is not among them: typer prints its help with rich, and ``status`` its table."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support.cli_probe import probe_stderr

# Imported by nothing `--help` runs: the database, templates, SMTP, HTTP, pydantic (typer's
# conversion of option values, herald/cli/coercion.py).
NOT_FOR_HELP = [
    "sqlalchemy",
    "alembic",
    "sqlmodel",
    "psycopg",
    "jinja2",
    "aiosmtplib",
    "httpx",
    "pydantic",
    "prometheus_client",
    "starlette",
]
# What typer's help renderer imports for markdown help and pretty tracebacks only: `herald
# --help` (the command list) goes without (herald/cli/registry.py); a command's own help not.
MARKDOWN = ["markdown_it", "pygments", "rich.markdown", "rich.traceback"]
# `status` reads the database with SQLAlchemy; the schema check reads alembic_version itself.
NOT_FOR_STATUS = [
    "alembic",
    "herald.migrations",
    "jinja2",
    "aiosmtplib",
    "httpx",
    "pydantic",
    "prometheus_client",
    "starlette",
]
# Not on SQLite: SQLAlchemy's PostgreSQL dialect (imported when a PostgreSQL statement or engine
# is made: dbtypes.dialect_insert, dispatch.models.POSTGRESQL_WHERE) and its driver.
POSTGRESQL = ["sqlalchemy.dialects.postgresql", "psycopg"]
# What reads campaign files (the spec's models, templates, audiences, schedules): a command that
# only reads or changes what is stored needs none of it.
CAMPAIGN_FILES = ["campaigns.spec", "pydantic", "jinja2", "templates", "httpx", "yaml", "croniter"]
# A worker reads no campaign file and, without DKIM keys, loads no signer. It does import the
# pause setting's parser (pydantic, PyYAML) at start, so that a campaign's first failure never
# waits for an import inside its transaction (campaigns.error_threshold). httpx is the webhook
# transport's, built at start.
NOT_FOR_A_WORKER = [
    *(name for name in CAMPAIGN_FILES if name not in ("httpx", "pydantic", "yaml")),
    "dispatch.dkim_signing",
    "dkim",
    "cryptography",
]
RUN = """
import sys
sys.argv = ["herald", *sys.argv[1:]]
from herald.cli import main
try:
    main()
except SystemExit as exit:
    code = exit.code
print("\\n".join(sorted(sys.modules)), file=sys.stderr)
"""


def loaded_by(*args: str, database_url: str = "sqlite://") -> set[str]:
    return set(probe_stderr(RUN, *args, database_url=database_url).split())


def imported(modules: set[str], names: list[str]) -> list[str]:
    return [n for n in names if n in modules or any(m.startswith(f"{n}.") for m in modules)]


def test_herald_help_imports_no_command_module_and_no_heavy_library() -> None:
    modules = loaded_by("--help")
    assert imported(modules, NOT_FOR_HELP + MARKDOWN) == []
    commands = {m for m in modules if m.startswith("herald.cli.")}
    assert commands <= {
        "herald.cli.base",
        "herald.cli.coercion",
        "herald.cli.global_options",
        "herald.cli.registry",
        "herald.cli.startup",
    }


def test_a_commands_help_imports_its_module_only() -> None:
    modules = loaded_by("status", "--help")
    assert imported(modules, NOT_FOR_HELP) == []
    assert "herald.cli.status" in modules
    assert "herald.cli.worker" not in modules


def test_status_imports_neither_migrations_nor_pydantic(db_url: str) -> None:
    modules = loaded_by("status", database_url=db_url)
    assert "herald.app.status" in modules  # it ran
    assert imported(modules, NOT_FOR_STATUS) == []


@pytest.mark.parametrize(
    ("command", "runs", "not_imported"),
    [
        (["status"], "herald.app.status", POSTGRESQL + NOT_FOR_STATUS),
        (["recover"], "herald.app.operator", POSTGRESQL + CAMPAIGN_FILES),
        (["prune", "--older-than", "30d"], "herald.app.prune", POSTGRESQL + CAMPAIGN_FILES),
        (["worker", "--until-idle"], "herald.app.worker", POSTGRESQL + NOT_FOR_A_WORKER),
        (["suppress", "list"], "campaigns.suppression", POSTGRESQL + CAMPAIGN_FILES),
    ],
)
def test_commands_on_sqlite_import_only_what_they_use(
    command: list[str], runs: str, not_imported: list[str], sqlite_template: Path, tmp_path: Path
) -> None:
    database = tmp_path / "herald.db"
    shutil.copy(sqlite_template, database)
    modules = loaded_by(*command, database_url=f"sqlite:///{database}")
    assert runs in modules  # it ran
    assert imported(modules, not_imported) == []
