"""The Show for shared rate limits: two real `herald worker` processes, one real SMTP server
that notes when each message arrives. The rates are measured on the server's clock.

- One domain limited to 5/s: over 20 seconds the server receives it at 5/s within 10 %, never
  faster, while another domain's mail goes through at once (the workers keep busy).
- A server that answers 421 for one domain: that domain's shared cell is halved, the other's
  is untouched (read from the cells, not from the machine's pace).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dbtypes import db_now
from dispatch.models import rate_limit
from dispatch.rates import SLOWDOWN_SECONDS
from tests.support.factories import launch, write_yaml
from tests.support.paths import HERALD
from tests.support.timed_smtp import TimedSMTPServer

R = rate_limit.c


def campaign(folder: Path, recipients: list[str]) -> Path:
    lines = ["name: paced", "from: news@herald.test", "audience:"]
    lines += [f"  - {r}" for r in recipients]
    lines += ["steps:", "  - id: hello", "    subject: Hello", "    text: Hello there"]
    return write_yaml(folder, "\n".join(lines) + "\n")


def run_two_workers(db_url: str, server: TimedSMTPServer, domain_rates: str) -> list[Any]:
    command = [
        str(HERALD), "worker", "--until-idle", "--json",
        "--database-url", db_url,
        "--smtp-url", f"smtp://{server.host}:{server.port}",
        "--concurrency", "10", "--poll", "0.05", "--retry-base", "0.01",
    ]  # fmt: skip
    env = {**os.environ, "HERALD_DOMAIN_RATES": domain_rates}
    workers = [
        subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        for _ in range(2)
    ]
    reports = []
    for worker in workers:
        stdout, stderr = worker.communicate(timeout=180)
        assert worker.returncode == 0, stderr
        reports.append(json.loads(stdout))
    return reports


def arrivals(server: TimedSMTPServer, domain: str) -> list[float]:
    return sorted(r.at for r in server.received() if r.rcpt.endswith("@" + domain))


def in_window(times: list[float], start: float, seconds: float) -> int:
    return sum(1 for t in times if start <= t < start + seconds)


def most_in_any_window(times: list[float], seconds: float) -> int:
    return max(in_window(times, t, seconds) for t in times)


def test_two_workers_hold_one_domain_to_its_rate_and_keep_busy_on_others(
    tmp_path: Path, engine: Engine, db_url: str
) -> None:
    limited = [f"l{i}@limited.test" for i in range(130)]  # 26 s at 5/s
    free = [f"f{i}@free.test" for i in range(200)]
    mixed = [address for pair in zip(limited, free[:130], strict=True) for address in pair]
    assert launch(engine, campaign(tmp_path / "c", mixed + free[130:])).new_jobs == 330
    with TimedSMTPServer() as server:
        reports = run_two_workers(db_url, server, "limited.test=5/s")
    assert sum(r["sent"] for r in reports) == 330
    assert all(r["sent"] > 0 for r in reports)  # both workers shared the work
    assert sum(r["rate_limited"] for r in reports) > 0
    ids = [r.message_id for r in server.received()]
    assert Counter(ids).most_common(1)[0][1] == 1  # each message once

    times = arrivals(server, "limited.test")
    first = times[0]
    # 20 seconds after the opening burst: 5/s within 10 %.
    measured = in_window(times, first + 2, 20) / 20
    assert 4.5 <= measured <= 5.5, measured
    # Never faster: slots are taken at most 20 * 5 plus the burst of 5 in any 20 s (the
    # property test proves that bound); arrival adds network jitter, so here within 10 %.
    assert most_in_any_window(times, 20) <= 110
    # And over 5 s: the burst + 5 s worth + jitter. Not over 1 s: a slot is taken right after
    # the claim and the send follows when the worker has a concurrency slot free, so on a
    # busy machine sends granted 0.2 s apart can arrive together (13 in one second seen in a
    # loaded CI run: grants are exact, arrivals lag unevenly). The per-window bound on the
    # grants themselves is tests/unit/test_rates.py's property.
    assert most_in_any_window(times, 5) <= 5 + 25 + 2
    # The other domain was not held up behind the limited one.
    assert max(arrivals(server, "free.test")) < first + 10


def test_a_421_slows_that_domain_only(tmp_path: Path, engine: Engine, db_url: str) -> None:
    """The verdict is what the code decided, not how fast a loaded machine delivered: the
    refusing domain's shared cell carries the halving (factor, until when, on the database
    clock) and the other domain's cell was never touched. The pace a factor gives is
    dispatch.rates' arithmetic, proven in tests/unit/test_rates.py and
    tests/integration/test_rate_cells.py; the lower bounds on the measured pace this test
    used to assert failed whenever the machine was busy."""
    refusing = [f"r{i}@refusing.test" for i in range(50)]
    steady = [f"s{i}@steady.test" for i in range(72)]
    mixed = [a for pair in zip(refusing, steady, strict=False) for a in pair] + steady[50:]
    assert launch(engine, campaign(tmp_path / "c", mixed)).new_jobs == 122

    def refuse(domain: str, nth: int) -> bool:
        return domain == "refusing.test" and nth == 21  # once, mid-way

    with TimedSMTPServer(refuse) as server:
        reports = run_two_workers(db_url, server, "refusing.test=4/s,steady.test=4/s")
    assert sum(r["sent"] for r in reports) == 122
    ((refused_at, refused_rcpt),) = server.refused
    assert refused_rcpt.endswith("@refusing.test")
    ids = [r.message_id for r in server.received()]
    assert Counter(ids).most_common(1)[0][1] == 1  # each message once
    assert len(arrivals(server, "refusing.test")) == 50
    # The refused message went out later, once: retried, not lost (ordering on one clock).
    (retried,) = [r.at for r in server.received() if r.rcpt == refused_rcpt]
    assert retried > refused_at

    with engine.connect() as conn:
        cells = {
            row.key: row
            for row in conn.execute(
                sa.select(R.key, R.per_second, R.factor, R.factor_until, db_now().label("now"))
            )
        }
    slowed, kept = cells["domain:refusing.test"], cells["domain:steady.test"]
    assert (slowed.per_second, slowed.factor) == (4.0, 0.5)  # halved once: one 421
    # Slowed from the 421 on, for SLOWDOWN_SECONDS: still in force when the run ended.
    assert slowed.factor_until is not None
    assert slowed.now < slowed.factor_until <= slowed.now + timedelta(seconds=SLOWDOWN_SECONDS)
    assert (kept.per_second, kept.factor, kept.factor_until) == (4.0, 1.0, None)
