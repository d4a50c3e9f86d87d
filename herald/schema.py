"""Bring a database to the current schema with Alembic (``herald db upgrade``).

Commands that need the schema call ``ensure_schema`` first, so a fresh machine just works.
The common case (already current) reads ``alembic_version`` with one query and compares it with
``HEAD_REVISION``, without importing Alembic or reading the migration scripts: that is most of
``herald status``'s start-up time otherwise. A test keeps the constant equal to Alembic's head.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Final

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from herald.errors import DatabaseError

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
# The newest migration's revision: update it with every new file in migrations/versions
# (tests/test_cli_package.py fails until you do).
HEAD_REVISION: Final = "0010"


def alembic_config() -> Config:
    """Alembic's configuration for Herald's migrations (tests also upgrade to one revision)."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


def head_revision() -> str | None:
    """The head according to Alembic's scripts (the slow, authoritative answer)."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def current_revision(engine: Engine) -> str | None:
    """The database's revision; None for an empty database."""
    with engine.connect() as connection:
        if not sa.inspect(connection).has_table("alembic_version"):
            return None
        row = connection.execute(sa.text("SELECT version_num FROM alembic_version")).first()
    return None if row is None else str(row[0])


def upgrade(engine: Engine) -> None:
    from alembic import command

    config = alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")


class SchemaTooNew(DatabaseError):
    """The database was upgraded by a newer Herald than this one: this release does not know
    its schema, so it must not touch it (exit 2: restarting will not help, upgrading will)."""

    exit_code = 2


def ensure_schema(engine: Engine) -> None:
    """Upgrade only when behind: the common case costs one small query."""
    current = current_revision(engine)
    if current == HEAD_REVISION:
        return
    if current is not None and _newer(current, HEAD_REVISION):
        # Say so in one line rather than let Alembic fail on a revision it cannot find: what
        # a host that missed a rolling upgrade meets.
        raise SchemaTooNew(
            f"the database's schema is at revision {current}, newer than this Herald's "
            f"({HEAD_REVISION})",
            hint="install the release that upgraded it on this host too",
        )
    upgrade(engine)


def _newer(revision: str, than: str) -> bool:
    """Herald's revisions are numbered (0001, 0002, ...); anything else is left to Alembic."""
    return revision.isdigit() and than.isdigit() and int(revision) > int(than)
