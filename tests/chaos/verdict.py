"""The verdict of a chaos run, read from the database, the server's ledger and the workers."""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from dispatch.keys import KeyTuple, message_id
from dispatch.models import send_event, send_job
from tests.chaos.evidence import JournalEvent, explain_in_doubt
from tests.chaos.model import HERALD, TERMINAL, ChaosResult, FaultLog, WorkerProcess
from tests.support.smtp_server import read_ledger_entries


def verify(
    result: ChaosResult,
    *,
    engine: sa.Engine,
    db_url: str,
    launched_at: datetime,
    addresses: list[str],
    ledger_path: Path,
    faults: FaultLog,
    dead: list[WorkerProcess],
    paused_pids: set[int],
) -> None:
    """Fill ``result`` with the verdict of a quiescent run."""
    for worker in dead:
        for line in worker.stderr_path.read_text(errors="replace").splitlines():
            if line.startswith("HERALD_CRASH "):
                result.crash_points_hit[line.split()[1]] += 1
                worker.fate = "crash_point"
    result.kills["crash_point"] += sum(1 for w in dead if w.fate == "crash_point")

    expected = {
        KeyTuple("onboarding", step, launched_at, address).key(): message_id(
            KeyTuple("onboarding", step, launched_at, address).key(), "herald.test"
        )
        for step in ("welcome", "tips", "later")
        for address in addresses
    }
    result.messages = len(expected)
    with engine.connect() as conn:
        rows = {
            r.key: r
            for r in conn.execute(
                sa.select(
                    send_job.c.id, send_job.c.key, send_job.c.state, send_job.c.message_id,
                    send_job.c.in_doubt_reason, send_job.c.lease_token,
                )
            )
        }  # fmt: skip
        doubted = [row.id for row in rows.values() if row.state == "in_doubt"]
        journal: dict[int, list[JournalEvent]] = {job_id: [] for job_id in doubted}
        for e in conn.execute(
            sa.select(
                send_event.c.job_id, send_event.c.token, send_event.c.from_state,
                send_event.c.to_state, send_event.c.actor, send_event.c.detail,
            )
            .where(send_event.c.job_id.in_(doubted))
            .order_by(send_event.c.job_id, send_event.c.id)
        ):  # fmt: skip
            journal[e.job_id].append(
                JournalEvent(e.token, e.from_state, e.to_state, e.actor, e.detail)
            )
    ledger = read_ledger_entries(ledger_path)
    accepted = Counter(entry.message_id for entry in ledger)
    result.duplicates = sorted(mid for mid, n in accepted.items() if n > 1)

    if set(rows) != set(expected):
        result.problems.append(
            f"key set differs: {len(set(expected) - set(rows))} missing, "
            f"{len(set(rows) - set(expected))} unexpected"
        )
    by_mid = {row.message_id: row for row in rows.values()}
    for key in expected:
        row = rows.get(key)
        if row is None or row.state not in TERMINAL:
            result.lost.append(key)
            continue
        result.states[row.state] += 1
        if row.state == "sent" and accepted[row.message_id] == 0:
            result.problems.append(f"{key[:12]} is sent but the server never accepted it")
    for mid in accepted:
        row = by_mid.get(mid)
        if row is None or row.state not in ("sent", "in_doubt"):
            state = row.state if row else "missing"
            result.problems.append(f"{mid} was accepted but its job is {state}")

    troubled_pids = {w.owner_pid for w in dead if w.fate} | paused_pids
    lease_losers = {w.owner_pid for w in dead if _lost_leases(w)}
    for row in rows.values():
        if row.state != "in_doubt":
            continue
        result.in_doubt_stored += accepted[row.message_id] > 0
        cause = explain_in_doubt(
            reason=row.in_doubt_reason,
            token=row.lease_token,
            events=journal[row.id],
            data_faults=faults.faults.get(row.message_id, []),
            troubled_pids=troubled_pids,
            lease_losers=lease_losers,
        )
        if cause is None:
            result.unexplained_in_doubt.append(
                f"{row.key[:12]}: {row.in_doubt_reason!r} journal="
                + "; ".join(
                    f"{e.from_state}->{e.to_state} t{e.token} {e.detail or ''}".strip()
                    for e in journal[row.id]
                )
            )
        else:
            result.in_doubt_causes[cause] += 1

    snapshot = _status_json(result, db_url)
    if snapshot is not None:
        for state, n in snapshot["totals"].items():
            if n != result.states.get(state, 0):
                result.problems.append(f"status --json says {state}={n}, database says otherwise")


def _lost_leases(worker: WorkerProcess) -> bool:
    """Whether a worker that exited on its own reported losing a lease (its --json report)."""
    if worker.fate is not None or worker.process.returncode != 0:
        return False
    try:
        report = json.loads(worker.stdout_path.read_text(errors="replace"))
    except (OSError, ValueError):
        return False
    return isinstance(report, dict) and int(report.get("lost_leases", 0)) > 0


def _status_json(result: ChaosResult, db_url: str) -> dict[str, Any] | None:
    completed = subprocess.run(
        [HERALD, "status", "--json", "--database-url", db_url],
        capture_output=True,
        text=True,
        timeout=600,  # a bound, not an expectation: a loaded machine may be slow
    )
    if completed.returncode != 0:
        result.problems.append(f"herald status failed: {completed.stderr.strip()}")
        return None
    document: dict[str, Any] = json.loads(completed.stdout)
    return document
