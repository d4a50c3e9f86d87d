"""``make soak``: chaos rounds back to back for as long as you like.

    HERALD_SOAK_SECONDS=3600 make soak            # SQLite
    HERALD_SOAK_DATABASE_URL=postgresql://postgres@127.0.0.1/soak make soak

Each round uses a fresh database (SQLite file, or drops and recreates the named PostgreSQL
database), a new seed, and the full chaos mix; the first failing round stops the soak with its
summary and exit code 1.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import make_url

from herald.db import create_engine, normalise_url
from herald.schema import upgrade
from tests.chaos.harness import Chaos, ChaosConfig


def fresh_database(base_url: str | None, folder: Path) -> str:
    if base_url is None:
        url = f"sqlite:///{folder / 'soak.db'}"
    else:
        url = base_url
        parsed = make_url(normalise_url(base_url))
        admin = sa.create_engine(parsed.set(database="postgres"), isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{parsed.database}" WITH (FORCE)')
            conn.exec_driver_sql(f'CREATE DATABASE "{parsed.database}"')
        admin.dispose()
    engine = create_engine(url)
    upgrade(engine)
    engine.dispose()
    return url


def main() -> int:
    seconds = float(os.environ.get("HERALD_SOAK_SECONDS", "300"))
    base_url = os.environ.get("HERALD_SOAK_DATABASE_URL")
    stop_at = time.monotonic() + seconds
    rounds = 0
    while time.monotonic() < stop_at:
        rounds += 1
        with tempfile.TemporaryDirectory(prefix="herald-soak-") as tmp:
            url = fresh_database(base_url, Path(tmp))
            config = ChaosConfig(db_url=url, seed=rounds * 7919 + int(time.time()))
            result = Chaos(Path(tmp), config).run()
        print(f"round {rounds}: {result.summary()}", flush=True)
        if not result.ok:
            print("SOAK FAILED", flush=True)
            return 1
    print(f"soak passed: {rounds} round(s) in {seconds:.0f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
