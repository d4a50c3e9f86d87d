"""Outbox growth: bytes of send_job, send_event and send_key (tables with TOAST, and indexes) per
million sent jobs, before and after ``herald prune`` (issue 12, item 5).

On a fresh PostgreSQL database: launch a one-step newsletter of N recipients (real composed
messages: an HTML template of about 2 kB of prose on Herald's layout, with its text part,
about 7 kB rendered), drain it to ``sent`` with a real worker and a no-op
transport, then measure three times, each scaled to 1,000,000 jobs:

- ``sent``: after the drain and a plain VACUUM (dead row versions of the transitions marked
  free, as autovacuum would): the files as the drain left them (each job's row was rewritten by
  claim, T4 and T5, so they hold several versions' worth of space, reused by later jobs);
- ``sent_compacted``: after VACUUM FULL: the live data of a million sent jobs;
- ``pruned``: after ``prune`` and a plain VACUUM: the files keep their size (PostgreSQL reuses
  the space for new rows, it does not give it back);
- ``pruned_compacted``: after VACUUM FULL: what a million *pruned* jobs cost for good (the rows
  that keep their keys), i.e. the long-run growth per million jobs once prune runs regularly.

``python -m bench.outbox_size [JOBS]`` prints the figures as JSON (a fresh database, dropped
after).
"""

from __future__ import annotations

import csv
import json
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from bench.drain import NoopTransport, drain_config, run_worker
from herald.app.launch import launch
from herald.app.prune import PruneOptions, prune, start, vacuum
from herald.db import create_engine

MILLION = 1_000_000
LAUNCH_AT = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)
CONCURRENCY = 64
TABLES = ("send_job", "send_event", "send_key")

CAMPAIGN = """\
name: {name}
from: "Herald Bench <news@herald.test>"
audience: people.csv
steps:
  - id: news
    subject: "{{{{ city }}}} this week, {{{{ name }}}}"
    template: news.html
"""
PARAGRAPH = (
    "<p>Here is what happened in {{ city }} this week. The council met on Tuesday and agreed "
    "the new cycle lanes; the market moves to the square from the first of the month, and the "
    'library opens late on Thursdays. <a href="https://news.herald.test/{{ city }}/week">'
    "Read the whole story</a>.</p>\n"
)
TEMPLATE = (
    '{% extends "herald/basic.html" %}\n{% block title %}News{% endblock %}\n'
    "{% block content %}\n<h1>Hello {{ name }}</h1>\n" + PARAGRAPH * 6 + "{% endblock %}\n"
)


def write_newsletter(folder: Path, recipients: int, name: str) -> Path:
    """A campaign file, its template and an N-row audience in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "people.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["email", "name", "city"])
        for i in range(recipients):
            writer.writerow([f"user{i:07d}@example.com", f"User {i}", f"City{i % 7}"])
    (folder / "news.html").write_text(TEMPLATE)
    path = folder / "campaign.yaml"
    path.write_text(CAMPAIGN.format(name=name))
    return path


@dataclass(frozen=True)
class Sizes:
    """Bytes per million jobs: heap (main fork), TOAST and the rest of the table (free space
    and visibility maps), indexes; ``total`` is pg_total_relation_size."""

    send_job_heap: int
    send_job_toast: int
    send_job_indexes: int
    send_job_total: int
    send_event_heap: int
    send_event_indexes: int
    send_event_total: int
    send_key_heap: int  # keys and mailbox identities (migration 0009): kept by prune
    send_key_indexes: int
    send_key_total: int

    @property
    def total(self) -> int:
        return self.send_job_total + self.send_event_total + self.send_key_total


@dataclass(frozen=True)
class OutboxSize:
    jobs: int
    payload_bytes_per_job: float  # the rendered message, as stored before compression
    events_per_job_sent: float
    events_per_job_pruned: float
    sent: Sizes
    sent_compacted: Sizes
    pruned: Sizes
    pruned_compacted: Sizes
    prune_seconds: float

    def as_dict(self) -> dict[str, object]:
        doc = asdict(self)
        for name in ("sent", "sent_compacted", "pruned", "pruned_compacted"):
            doc[name]["total"] = getattr(self, name).total
        return doc


def _sizes(engine: Engine, jobs: int) -> Sizes:
    scale = MILLION / jobs
    figures: dict[str, int] = {}
    with engine.connect() as conn:
        for table in TABLES:
            row = conn.execute(
                sa.text(
                    "select pg_relation_size(cast(:t as regclass)),"
                    " pg_table_size(cast(:t as regclass)),"
                    " pg_indexes_size(cast(:t as regclass)),"
                    " pg_total_relation_size(cast(:t as regclass))"
                ),
                {"t": table},
            ).one()
            figures[f"{table}_heap"] = round(row[0] * scale)
            figures[f"{table}_rest"] = round((row[1] - row[0]) * scale)
            figures[f"{table}_indexes"] = round(row[2] * scale)
            figures[f"{table}_total"] = round(row[3] * scale)
    return Sizes(
        send_job_heap=figures["send_job_heap"],
        send_job_toast=figures["send_job_rest"],
        send_job_indexes=figures["send_job_indexes"],
        send_job_total=figures["send_job_total"],
        send_event_heap=figures["send_event_heap"],
        send_event_indexes=figures["send_event_indexes"],
        send_event_total=figures["send_event_total"],
        send_key_heap=figures["send_key_heap"],
        send_key_indexes=figures["send_key_indexes"],
        send_key_total=figures["send_key_total"],
    )


def _scalar(engine: Engine, sql: str) -> float:
    with engine.connect() as conn:
        return float(conn.execute(sa.text(sql)).scalar_one() or 0)


def _vacuum_full(engine: Engine) -> None:
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text(f"VACUUM FULL ANALYZE {', '.join(TABLES)}"))


def measure_outbox_size(url: str, jobs: int) -> OutboxSize:
    """Launch, drain, measure, prune, measure (``url``: a fresh, migrated PostgreSQL database)."""
    if not url.startswith("postgresql"):
        raise ValueError("measure_outbox_size needs PostgreSQL (relation sizes)")
    engine = create_engine(url)
    try:
        with tempfile.TemporaryDirectory(prefix="herald-outbox-size-") as folder:
            path = write_newsletter(Path(folder), jobs, "outbox-size")
            created = launch(engine, path, clock=lambda: LAUNCH_AT, actor="bench").fanout.new_jobs
        if created != jobs:
            raise RuntimeError(f"launch created {created} jobs for {jobs} recipients")
        worker = run_worker(engine, NoopTransport(), drain_config(CONCURRENCY))
        if worker.report.sent != jobs:
            raise RuntimeError(f"drain sent {worker.report.sent} of {jobs}")
        payload = _scalar(engine, "select avg(length(payload)) from send_job")
        vacuum(engine)
        sent = _sizes(engine, jobs)
        events_sent = _scalar(engine, "select count(*) from send_event") / jobs
        _vacuum_full(engine)
        sent_compacted = _sizes(engine, jobs)
        # Every job just finished: a zero age prunes them all (the CLI's one-day minimum is
        # for operators; the use case takes the age as given).
        options = PruneOptions(older_than=timedelta(0), batch_size=1000)
        started = time.perf_counter()
        report = prune(engine, options, start(engine, options), actor="bench")
        prune_seconds = time.perf_counter() - started
        if report.jobs != jobs:
            raise RuntimeError(f"prune pruned {report.jobs} of {jobs} jobs")
        vacuum(engine)
        pruned = _sizes(engine, jobs)
        events_pruned = _scalar(engine, "select count(*) from send_event") / jobs
        _vacuum_full(engine)
        pruned_compacted = _sizes(engine, jobs)
    finally:
        engine.dispose()
    return OutboxSize(
        jobs=jobs,
        payload_bytes_per_job=payload,
        events_per_job_sent=events_sent,
        events_per_job_pruned=events_pruned,
        sent=sent,
        sent_compacted=sent_compacted,
        pruned=pruned,
        pruned_compacted=pruned_compacted,
        prune_seconds=prune_seconds,
    )


def main(argv: list[str]) -> None:
    from bench.databases import fresh_postgres

    jobs = int(argv[0]) if argv else 20_000
    with fresh_postgres("herald_outbox_size") as url:
        result = measure_outbox_size(url, jobs)
    print(json.dumps(result.as_dict(), indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])
