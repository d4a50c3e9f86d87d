"""The Show for shared rate limits: two real `herald worker` processes, one real SMTP server
that notes when each message arrives. The rates are measured on the server's clock.

- One domain limited to 5/s: over 20 seconds the server receives it at 5/s within 10 %, never
  more than the burst + 5 in any second (judged on the T4 events that took the slots, and on
  the server's arrivals given how long each took to follow its T4), while another domain's
  mail goes through at once (the workers keep busy) though the server is slow to accept it.
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
from dispatch.models import rate_limit, send_job
from dispatch.rates import EPSILON, SLOWDOWN_SECONDS, burst
from tests.support.factories import launch, write_yaml
from tests.support.paths import HERALD
from tests.support.timed_smtp import TimedSMTPServer

R = rate_limit.c
J = send_job.c


def campaign(folder: Path, recipients: list[str]) -> Path:
    lines = ["name: paced", "from: news@herald.test", "audience:"]
    lines += [f"  - {r}" for r in recipients]
    lines += ["steps:", "  - id: hello", "    subject: Hello", "    text: Hello there"]
    return write_yaml(folder, "\n".join(lines) + "\n")


def run_two_workers(db_url: str, server: TimedSMTPServer, domain_rates: str) -> list[Any]:
    """Both workers' ``--json`` reports."""
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


def t4_moments(engine: Engine, domain: str) -> dict[str, float]:
    """Each sent message's T4 moment (epoch seconds, database clock) by Message-ID: the
    transaction that took its rate-limit slot and opened the door to its DATA."""
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(J.message_id, J.send_started_at).where(
                J.recipient.endswith("@" + domain), J.state == "sent"
            )
        ).all()
    return {row.message_id: row.send_started_at.timestamp() for row in rows}


def test_two_workers_hold_one_domain_to_its_rate_and_keep_busy_on_others(
    tmp_path: Path, engine: Engine, db_url: str
) -> None:
    limited = [f"l{i}@limited.test" for i in range(130)]  # 26 s at 5/s
    free = [f"f{i}@free.test" for i in range(200)]
    mixed = [address for pair in zip(limited, free[:130], strict=True) for address in pair]
    assert launch(engine, campaign(tmp_path / "c", mixed + free[130:])).new_jobs == 330
    # The server takes 0.5 s to accept each free.test message, so the workers' concurrency
    # slots are mostly busy with those: a send that got its slot early would wait for one.
    with TimedSMTPServer(latency=lambda domain: 0.5 if domain == "free.test" else 0.0) as server:
        reports = run_two_workers(db_url, server, "limited.test=5/s")
    assert sum(r["sent"] for r in reports) == 330
    assert all(r["sent"] > 0 for r in reports)  # both workers shared the work
    assert sum(r["rate_limited"] for r in reports) > 0
    ids = [r.message_id for r in server.received()]
    assert Counter(ids).most_common(1)[0][1] == 1  # each message once

    times = arrivals(server, "limited.test")
    first = times[0]
    # 20 seconds after the opening burst: at most 5/s plus 10 %, and at least 3.5/s. The floor
    # is loose because how promptly workers use their slots depends on the machine's load (4.2/s
    # was seen at load 19); what it must catch is a limiter that wastes slots by its own doing,
    # e.g. one that counts each send twice (2.5/s) or refills only between claims.
    measured = in_window(times, first + 2, 20) / 20
    assert 3.5 <= measured <= 5.5, measured
    # Never faster, judged on events rather than on how promptly a busy machine sent: each
    # slot is taken in the transaction of the send's T4, so the T4 moments themselves keep
    # GCRA's bound: at most 5 * (1 + EPSILON) + burst in any second, whatever the load.
    started = t4_moments(engine, "limited.test")
    bound = int(5 * (1 + EPSILON) + burst(5))  # 10
    assert most_in_any_window(sorted(started.values()), 1.0) <= bound
    # The relay's view: every message arrived after its T4 committed, and so in any second
    # no more than the T4s of that second plus those of the longest T4-to-arrival lag before
    # it (a few milliseconds on an idle machine: the same 10).
    at = {r.message_id: r.at for r in server.received() if r.rcpt.endswith("@limited.test")}
    assert at.keys() == started.keys()
    lag = max(at[m] - started[m] for m in at)
    assert min(at[m] - started[m] for m in at) > 0
    assert most_in_any_window(times, 1.0) <= int(5 * (1 + lag + EPSILON) + burst(5)), lag
    # The other domain was not held up behind the limited one: all of it was in before half
    # of the limited domain's (events, not seconds: its 0.5 s replies set its own pace).
    assert max(arrivals(server, "free.test")) < times[len(times) // 2]


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
