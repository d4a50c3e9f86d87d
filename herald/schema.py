"""Bring a database to the current schema with Alembic (``herald db upgrade``).

Commands that need the schema call ``ensure_schema`` first, so a fresh machine just works.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Engine

MIGRATIONS = Path(__file__).resolve().parent / "migrations"


def alembic_config() -> Config:
    """Alembic's configuration for Herald's migrations (tests also upgrade to one revision)."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def upgrade(engine: Engine) -> None:
    config = alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")


def ensure_schema(engine: Engine) -> None:
    """Upgrade only when behind: the common case costs one small query."""
    if current_revision(engine) != head_revision():
        upgrade(engine)
