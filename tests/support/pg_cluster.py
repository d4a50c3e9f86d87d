"""A private PostgreSQL cluster (initdb in a temporary folder, on a free port) for tests that
restart the server.

The chaos suite restarts PostgreSQL in the middle of a run. Restarting the shared server on
127.0.0.1:5432 would break every test running beside it (the suite runs on several xdist
workers) and anyone else's tests on the same machine, so the test that restarts gets a cluster
of its own, which nobody else connects to.

Needs PostgreSQL's server binaries (``initdb``/``pg_ctl`` on PATH, or Debian's
/usr/lib/postgresql/<version>/bin). PostgreSQL refuses to run as root: as root (a CI
container) the cluster runs as the ``postgres`` user.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RestartableDatabase:
    """A migrated database and how to restart its server (the ``restartable_db`` fixture)."""

    url: str
    restart: Callable[[], None] | None  # None: SQLite, no server to restart


class ClusterUnavailable(Exception):
    """This machine cannot run a private cluster (no server binaries, or root without a
    ``postgres`` user); the message says which."""


def server_bindir() -> Path:
    on_path = shutil.which("initdb")
    if on_path is not None:
        return Path(on_path).parent
    versions = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda p: [int(n) for n in re.findall(r"\d+", p.parent.parent.name)],
    )
    if not versions:
        raise ClusterUnavailable(
            "a private PostgreSQL cluster needs initdb (PostgreSQL's server binaries)"
        )
    return versions[-1].parent


def _run_as() -> tuple[list[str], pwd.struct_passwd | None]:
    if os.geteuid() != 0:
        return [], None
    try:
        user = pwd.getpwnam("postgres")
    except KeyError:
        raise ClusterUnavailable("running as root and there is no postgres user") from None
    runuser = shutil.which("runuser")
    if runuser is None:
        raise ClusterUnavailable("running as root and runuser is not available")
    return [runuser, "-u", "postgres", "--"], user


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PrivateCluster:
    """One initdb'd cluster; ``url(name)`` for a database in it, ``restart()`` as a DBA would."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.data = folder / "data"
        self.log = folder / "server.log"
        self.bindir = server_bindir()
        self.prefix, self.owner = _run_as()
        self.port = 0

    def _tool(self, name: str, *args: str) -> None:
        result = subprocess.run(
            [*self.prefix, str(self.bindir / name), *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        if result.returncode != 0:
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"{name} {' '.join(args)} failed: {result.stderr}\n{log}")

    def init(self) -> None:
        if self.owner is not None:
            os.chown(self.folder, self.owner.pw_uid, self.owner.pw_gid)
        self._tool(
            "initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust",
            "-E", "UTF8", "--no-instructions",
        )  # fmt: skip

    def start(self) -> None:
        # A free port can be taken between the probe and the server's bind: try a few.
        for attempt in range(5):
            self.port = _free_port()
            options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.folder}"
            try:
                self._tool("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w",
                           "-o", options, "start")  # fmt: skip
                return
            except RuntimeError:
                if attempt == 4:
                    raise

    def restart(self) -> None:
        """Fast shutdown (sessions are cut, as in a real restart) and start on the same port."""
        self._tool("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-m", "fast",
                   "restart")  # fmt: skip

    def stop(self) -> None:
        self._tool("pg_ctl", "-D", str(self.data), "-w", "-m", "immediate", "stop")

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"


@contextmanager
def private_cluster() -> Iterator[PrivateCluster]:
    """A started private cluster, stopped and deleted afterwards.

    Its folder is made with mkdtemp rather than pytest's tmp_path: as root, tmp_path's parents
    are private to root and the ``postgres`` user could not reach the data directory.
    """
    folder = Path(tempfile.mkdtemp(prefix="herald-pg-"))
    try:
        cluster = PrivateCluster(folder)
        cluster.init()
        cluster.start()
        try:
            yield cluster
        finally:
            cluster.stop()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
