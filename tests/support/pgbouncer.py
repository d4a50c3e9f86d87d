"""A private PgBouncer in transaction pooling mode, in front of the test PostgreSQL.

Herald's workers, schedulers and ``herald serve`` must work through a transaction pooler, where
consecutive transactions of one client land on different server connections. The pooler here
is Debian's ``pgbouncer`` (1.18: no prepared-statement tracking, so the client must not prepare
server-side), started from an ini of its own in a temporary folder, on a free port of
127.0.0.1, with a small pool so that server connections really are shared between clients.

Every database of the test server is reachable through it under its own name (the ``*``
entry), so a test's URL becomes a pooled one by swapping host and port (``PgBouncer.url``).
The admin console (database ``pgbouncer``, user ``postgres``) answers ``SHOW POOLS`` and
``SHOW SERVERS``, to check that sharing happened.

PgBouncer refuses to run as root: as root (a CI container) it is started with ``-u postgres``.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy.engine import make_url

DEFAULT_POOL_SIZE = 4  # smaller than the clients of any test: server connections are shared
START_TIMEOUT = 30.0


class PgBouncerUnavailable(Exception):
    """This machine cannot run PgBouncer (not installed, or root without a ``postgres`` user)."""


def pgbouncer_binary() -> str:
    found = shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin:/sbin")
    if found is None:
        raise PgBouncerUnavailable("pgbouncer is not installed (apt-get install pgbouncer)")
    return found


def _switch_user() -> pwd.struct_passwd | None:
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam("postgres")
    except KeyError:
        raise PgBouncerUnavailable("running as root and there is no postgres user") from None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class PgBouncer:
    """A running PgBouncer: ``url(direct_url)`` is the same database through the pooler."""

    port: int
    folder: Path
    process: subprocess.Popen[bytes]
    pool_size: int

    @property
    def log(self) -> str:
        path = self.folder / "pgbouncer.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def url(self, direct_url: str) -> str:
        """``direct_url`` (a database of the test server) through this pooler."""
        parsed = make_url(direct_url).set(host="127.0.0.1", port=self.port)
        return parsed.render_as_string(hide_password=False)

    def admin(self, command: str) -> list[dict[str, Any]]:
        """A command of the admin console (``SHOW POOLS``), its rows as dicts."""
        conninfo = f"host=127.0.0.1 port={self.port} dbname=pgbouncer user=postgres"
        # The console speaks the simple query protocol only.
        with psycopg.connect(conninfo, autocommit=True, prepare_threshold=None) as conn:
            cursor = conn.cursor()
            cursor.execute(command.encode())  # bytes: psycopg sends it as a simple query
            names = [column.name for column in cursor.description or ()]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def _write_config(folder: Path, port: int, target_host: str, target_port: int, pool: int) -> Path:
    (folder / "userlist.txt").write_text('"postgres" ""\n')
    ini = folder / "pgbouncer.ini"
    ini.write_text(
        "\n".join(
            [
                "[databases]",
                f"* = host={target_host} port={target_port}",
                "[pgbouncer]",
                "listen_addr = 127.0.0.1",
                f"listen_port = {port}",
                "unix_socket_dir =",
                "auth_type = trust",
                f"auth_file = {folder / 'userlist.txt'}",
                "admin_users = postgres",
                "pool_mode = transaction",
                f"default_pool_size = {pool}",
                "max_client_conn = 1000",
                f"logfile = {folder / 'pgbouncer.log'}",
                "pidfile =",
                # Clients ask for it at start-up (not psycopg today, but JDBC, psql tools);
                # PgBouncer 1.18 refuses unknown start-up parameters otherwise.
                "ignore_startup_parameters = extra_float_digits",
                "",
            ]
        )
    )
    return ini


def _accepts(port: int) -> bool:
    try:
        with psycopg.connect(
            f"host=127.0.0.1 port={port} dbname=pgbouncer user=postgres",
            autocommit=True,
            prepare_threshold=None,
            connect_timeout=2,
        ) as conn:
            conn.execute(b"SHOW VERSION")
            return True
    except psycopg.OperationalError:
        return False


def _start(folder: Path, target_host: str, target_port: int, pool: int) -> PgBouncer:
    binary = pgbouncer_binary()
    user = _switch_user()
    if user is not None:
        os.chown(folder, user.pw_uid, user.pw_gid)
    last_log = ""
    # A free port can be taken between the probe and PgBouncer's bind: try a few.
    for _ in range(5):
        port = _free_port()
        ini = _write_config(folder, port, target_host, target_port, pool)
        for path in folder.iterdir():
            if user is not None:
                os.chown(path, user.pw_uid, user.pw_gid)
        command = [binary, *(["-u", user.pw_name] if user else []), str(ini)]
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        bouncer = PgBouncer(port, folder, process, pool)
        deadline = time.monotonic() + START_TIMEOUT
        while process.poll() is None and time.monotonic() < deadline:
            if _accepts(port):
                return bouncer
            time.sleep(0.05)  # polling a port that is not open yet; bounded by the deadline
        last_log = bouncer.log
        _stop(process)
        (folder / "pgbouncer.log").unlink(missing_ok=True)
    raise RuntimeError(f"pgbouncer did not start: {last_log[-2000:]}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()  # SIGTERM: immediate shutdown, clients are cut
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=15)


@contextmanager
def running_pgbouncer(
    target: str = "postgresql://postgres@127.0.0.1:5432/test", pool_size: int = DEFAULT_POOL_SIZE
) -> Iterator[PgBouncer]:
    """A started PgBouncer in front of ``target``'s server; stopped and deleted afterwards.

    PgBouncerUnavailable when it cannot run here. Its folder comes from mkdtemp, not pytest's
    tmp_path: as root, tmp_path's parents are private to root and ``postgres`` could not read
    the ini.
    """
    parsed = make_url(target)
    folder = Path(tempfile.mkdtemp(prefix="herald-pgbouncer-"))
    try:
        bouncer = _start(folder, parsed.host or "127.0.0.1", parsed.port or 5432, pool_size)
        try:
            yield bouncer
        finally:
            _stop(bouncer.process)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def pgbouncer_for_test(target: str, pool_size: int = DEFAULT_POOL_SIZE) -> Iterator[PgBouncer]:
    """``running_pgbouncer`` for a test fixture: without PgBouncer the test is skipped with the
    reason, or fails under HERALD_REQUIRE_POSTGRES=1 (CI never skips it silently)."""
    with ExitStack() as stack:
        try:
            bouncer = stack.enter_context(running_pgbouncer(target, pool_size))
        except PgBouncerUnavailable as exc:
            if os.environ.get("HERALD_REQUIRE_POSTGRES") == "1":
                pytest.fail(f"PgBouncer required (HERALD_REQUIRE_POSTGRES=1) but {exc}")
            pytest.skip(f"{exc}; PgBouncer tests skipped")
        yield bouncer
