"""``python -m tests.support.pass_process DB_URL NOW``: one scheduler pass in its own process,
at ``NOW`` (ISO 8601), for tests that kill it midway. Prints the pass's JSON summary."""

from __future__ import annotations

import json
import sys
from datetime import datetime

from herald.db import create_engine
from scheduler.passes import run_pass


def main(url: str, now: str) -> None:
    engine = create_engine(url)
    try:
        report = run_pass(
            engine, now=datetime.fromisoformat(now), actor="pass-process", takeover_after=0
        )
    finally:
        engine.dispose()
    print(json.dumps(report.summary()))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
