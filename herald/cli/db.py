"""``herald db upgrade``: create or upgrade the database schema."""

from __future__ import annotations

import typer

from herald.cli.base import DatabaseUrl, app, errors_mapped, keep_until_done
from herald.defaults import DEFAULT_DATABASE_URL
from herald.output import out

db_app = typer.Typer(help="Database schema.", no_args_is_help=True)
app.add_typer(db_app, name="db")


@db_app.command("upgrade")
def db_upgrade(database_url: DatabaseUrl = DEFAULT_DATABASE_URL) -> None:
    """Create or upgrade the schema to the current version."""
    from herald.app.engine import upgrade_database
    from herald.db import create_engine

    with errors_mapped():
        upgrade_database(keep_until_done(create_engine(database_url)))
        out.print("database is at the current schema")
