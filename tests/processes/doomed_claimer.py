"""A worker that dies between its claim and T4: claims every due job through the real
``OutboxStore.claim``, commits, prints how many, then blocks until it is killed.

Run as ``python -m tests.processes.doomed_claimer URL LIMIT LEASE_SECONDS``.
"""

from __future__ import annotations

import json
import os
import signal
import sys

from dispatch.store import OutboxStore
from herald.db import create_engine


def main(url: str, limit: int, lease_seconds: float) -> None:
    engine = create_engine(url)
    store = OutboxStore(engine.dialect.name)
    with engine.begin() as conn:
        claimed = store.claim(
            conn, owner=f"doomed:{os.getpid()}", limit=limit, lease_seconds=lease_seconds
        )
    print(json.dumps({"claimed": len(claimed)}), flush=True)
    signal.pause()  # SIGKILL ends the process with its claims held


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]))
