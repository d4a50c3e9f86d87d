"""Files holding people's mail are private (issue 7, item 10): the SQLite database, its WAL,
SHM and rollback journal, and the dev sink's Maildir messages are created 0600 whatever the
umask allows."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiosmtplib import SMTP

from herald.sink import start_sink
from tests.support.campaign_files import write_campaign
from tests.support.factories import invoke


@pytest.fixture(autouse=True)
def permissive_umask() -> Iterator[None]:
    """The usual 022: without the fix, files would be created 0644."""
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_launch_creates_the_database_and_its_wal_and_shm_0600(tmp_path: Path) -> None:
    path, _ = write_campaign(tmp_path / "campaign", recipients=3)
    db = tmp_path / "fresh" / "herald.db"
    db.parent.mkdir()
    result = invoke("launch", str(path), "--database-url", f"sqlite:///{db}")
    assert result.exit_code == 0, result.output
    assert mode(db) == 0o600
    # The WAL and SHM exist while a connection is open (the last one to close removes them):
    # open one, write, and look at them then. SQLite derives their mode from the database's.
    connection = sqlite3.connect(db, isolation_level=None)
    try:
        assert connection.execute("pragma journal_mode").fetchone() == ("wal",)
        connection.execute("update campaign set status = status")
        wal, shm = Path(f"{db}-wal"), Path(f"{db}-shm")
        assert wal.exists()
        assert shm.exists()
        assert (mode(wal), mode(shm)) == (0o600, 0o600)
    finally:
        connection.close()
    assert {mode(p) for p in db.parent.iterdir()} == {0o600}


def test_a_rollback_journal_is_0600_too(tmp_path: Path) -> None:
    path, _ = write_campaign(tmp_path / "campaign", recipients=1)
    db = tmp_path / "herald.db"
    result = invoke("launch", str(path), "--database-url", f"sqlite:///{db}")
    assert result.exit_code == 0, result.output
    connection = sqlite3.connect(db, isolation_level=None)
    try:
        # persist: the journal stays after the commit, so it can be looked at.
        assert connection.execute("pragma journal_mode=persist").fetchone() == ("persist",)
        connection.execute("create table scratch (x)")
        journal = Path(f"{db}-journal")
        assert journal.exists()
        assert mode(journal) == 0o600
    finally:
        connection.close()


def test_an_existing_database_keeps_its_mode(tmp_path: Path) -> None:
    db = tmp_path / "herald.db"
    sqlite3.connect(db).close()
    os.chmod(db, 0o640)  # the operator's choice, e.g. a group of auditors
    result = invoke("db", "upgrade", "--database-url", f"sqlite:///{db}")
    assert result.exit_code == 0, result.output
    assert mode(db) == 0o640


def test_a_missing_directory_is_a_one_line_error(tmp_path: Path) -> None:
    db = tmp_path / "nowhere" / "herald.db"
    result = invoke("db", "upgrade", "--database-url", f"sqlite:///{db}")
    assert result.exit_code == 1, result.output
    assert "cannot create the database file" in result.output
    assert "Traceback" not in result.output


def test_sink_messages_are_0600(tmp_path: Path) -> None:
    maildir = tmp_path / "Maildir"
    message = b"Subject: hi\r\nMessage-ID: <m@x.test>\r\n\r\nhello\r\n"

    async def send(port: int) -> None:
        client = SMTP(hostname="127.0.0.1", port=port, local_hostname="client.test", timeout=10)
        await client.connect()
        await client.sendmail("a@x.test", ["b@x.test"], message)
        await client.quit()

    with start_sink(maildir, port=0) as sink:
        asyncio.run(send(sink.port))
    stored = list((maildir / "new").iterdir())
    assert len(stored) == 1
    assert mode(stored[0]) == 0o600
