"""Read-only commands never create (or migrate) a database: run in the wrong folder, ``herald
status`` says which file it looked for instead of creating an empty ``herald.db`` there and
reporting "no campaigns". Writers still create and upgrade as before. SQLite and PostgreSQL.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from herald.schema import HEAD_REVISION, current_revision
from tests.integration.test_migration_0003 import bare_engine as bare_engine
from tests.integration.test_migration_0003 import upgrade_to
from tests.support.factories import cli, invoke

READ_ONLY = [
    ["status"],
    ["status", "--json"],
    ["in-doubt", "list"],
    ["dead", "list"],
    ["suppress", "list"],
    ["feedback"],
]
IDS = [" ".join(command) for command in READ_ONLY]


@pytest.fixture
def empty_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in [n for n in os.environ if n.startswith("HERALD_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    folder = tmp_path / "empty"
    folder.mkdir()
    monkeypatch.chdir(folder)
    return folder


def url_of(engine: Engine) -> str:
    return engine.url.render_as_string(hide_password=False)


def tables(engine: Engine) -> list[str]:
    with engine.connect() as conn:
        return sorted(sa.inspect(conn).get_table_names())


def error_lines(output: str) -> tuple[str, str]:
    lines = output.strip().splitlines()
    assert len(lines) == 2, output
    assert "Traceback" not in output
    return lines[0], lines[1].strip()


@pytest.mark.parametrize("command", READ_ONLY, ids=IDS)
def test_in_an_empty_folder_it_names_the_file_and_creates_nothing(
    empty_folder: Path, command: list[str]
) -> None:
    result = invoke(*command)
    assert result.exit_code == 1, result.output
    error, hint = error_lines(result.output)
    assert error == f"error: no database at {empty_folder / 'herald.db'}"
    assert "wrong folder?" in hint
    assert "--database-url" in hint
    assert "herald db upgrade" in hint
    assert list(empty_folder.iterdir()) == []


@pytest.mark.parametrize("command", READ_ONLY, ids=IDS)
def test_a_named_file_that_does_not_exist(empty_folder: Path, command: list[str]) -> None:
    missing = empty_folder.parent / "elsewhere" / "h.db"
    result = cli(f"sqlite:///{missing}", *command)
    assert result.exit_code == 1, result.output
    assert error_lines(result.output)[0] == f"error: no database at {missing}"
    assert not missing.parent.exists()


@pytest.mark.parametrize("command", READ_ONLY, ids=IDS)
def test_a_database_without_herald_schema_is_not_migrated(
    bare_engine: Engine, command: list[str]
) -> None:
    # An empty SQLite file, or an empty PostgreSQL database (the wrong one named, say).
    result = cli(url_of(bare_engine), *command)
    assert result.exit_code == 1, result.output
    error, hint = error_lines(result.output)
    assert error.endswith("is not a Herald database (it has no Herald schema)"), error
    assert "herald db upgrade" in hint
    assert tables(bare_engine) == []


def test_a_schema_behind_this_herald_asks_for_an_upgrade(bare_engine: Engine) -> None:
    upgrade_to(bare_engine, "0005")
    url = url_of(bare_engine)
    result = cli(url, "status")
    assert result.exit_code == 1, result.output
    error, hint = error_lines(result.output)
    assert f"is at schema revision 0005; this Herald reads revision {HEAD_REVISION}" in error
    assert "herald db upgrade" in hint
    assert current_revision(bare_engine) == "0005"
    # A writer upgrades it, as before; then the read-only command reads it.
    added = cli(url, "suppress", "add", "ann@example.com")
    assert added.exit_code == 0, added.output
    assert current_revision(bare_engine) == HEAD_REVISION
    assert cli(url, "status").exit_code == 0


def test_writers_still_create_the_database(bare_engine: Engine) -> None:
    url = url_of(bare_engine)
    assert cli(url, "suppress", "add", "ann@example.com").exit_code == 0
    listed = cli(url, "suppress", "list", "--json")
    assert listed.exit_code == 0, listed.output
    assert "ann@example.com" in listed.stdout


def test_a_writer_creates_a_new_sqlite_file(empty_folder: Path) -> None:
    assert invoke("suppress", "add", "ann@example.com").exit_code == 0
    assert (empty_folder / "herald.db").is_file()
    result = invoke("status", "--json")
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("command", READ_ONLY, ids=IDS)
def test_a_current_database_is_read(db_url: str, command: list[str]) -> None:
    result = cli(db_url, *command)
    assert result.exit_code == 0, result.output


def test_config_opens_no_database(empty_folder: Path) -> None:
    assert invoke("config").exit_code == 0
    assert list(empty_folder.iterdir()) == []
