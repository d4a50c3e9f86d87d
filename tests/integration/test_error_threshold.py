"""A campaign whose sends keep failing pauses itself (``pause_on_errors``), on SQLite and
PostgreSQL, against a real SMTP server that rejects the messages with 550 5.7.1 — what a
blacklisted sender or a relay refusing the content looks like from the worker.

Shown: the campaign pauses after about ``min`` failures, not after its audience; the rest of the
audience stays pending (unclaimed, no attempt used); ``herald status`` (JSON and text) says why;
``herald resume`` clears the reason and restarts the count, so the failures that caused the
pause do not pause it again; the remaining jobs then go out. Several worker processes pause it
once.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import Engine

from dispatch.states import State
from dispatch.store import OutboxStore
from herald.app.worker import WorkerOptions, build_worker, run_worker
from tests.support.campaign_files import write_audience
from tests.support.cli_probe import probe_stderr
from tests.support.factories import cli, launch
from tests.support.paths import HERALD
from tests.support.smtp_server import Fault, LedgerSMTPServer

LAUNCH = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
CONCURRENCY = 5

CAMPAIGN = """\
name: brake
from: "Herald Tests <news@herald.test>"
audience: people.csv
{pause}
steps:
  - id: only
    subject: "Hello {{{{ name }}}}"
    text: "Hello {{{{ name }}}}."
"""


class Rejecting:
    """A fault plan the test switches: reject every message at the end of DATA, or the next
    ``n`` and accept the rest. RCPT-stage calls (addresses) are left alone."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reject_next: int | None = None  # None: reject everything

    def __call__(self, key: str, attempt: int) -> Fault:
        if not key.startswith("<"):  # a recipient address at RCPT, not a Message-ID at DATA
            return Fault.ACCEPT
        with self._lock:
            if self.reject_next is None:
                return Fault.REJECT
            if self.reject_next > 0:
                self.reject_next -= 1
                return Fault.REJECT
        return Fault.ACCEPT


@pytest.fixture
def rejecting() -> Rejecting:
    return Rejecting()


@pytest.fixture
def server(tmp_path: Path, rejecting: Rejecting) -> Iterator[LedgerSMTPServer]:
    with LedgerSMTPServer(tmp_path / "ledger.txt", fault_plan=rejecting) as running:
        yield running


def _campaign(folder: Path, recipients: int, pause: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    write_audience(folder / "people.csv", recipients)
    path = folder / "campaign.yaml"
    path.write_text(CAMPAIGN.format(pause=pause), encoding="utf-8")
    return path


def _send(engine: Engine, server: LedgerSMTPServer) -> None:
    options = WorkerOptions(
        concurrency=CONCURRENCY, until_idle=True, poll=0.05, retry_base=0.01, lease=30
    )
    worker = build_worker(engine, f"smtp://{server.host}:{server.port}", options)
    run_worker(worker)


def _counts(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        rows = OutboxStore(engine.dialect.name).counts(conn, "brake")
    counts: dict[str, int] = {}
    for _, _, state, n in rows:
        counts[state] = counts.get(state, 0) + n
    return counts


def _status(db_url: str) -> dict[str, Any]:
    result = cli(db_url, "status", "--json")
    assert result.exit_code == 0, result.output
    doc: dict[str, Any] = json.loads(result.stdout)["campaigns"][0]
    return doc


def _claims_and_attempts(engine: Engine) -> list[tuple[int, int]]:
    with engine.connect() as conn:
        rows = OutboxStore(engine.dialect.name).jobs_in_state(conn, State.PENDING, campaign="brake")
    return [(row.claims, row.send_attempts) for row in rows]


def test_rejected_sends_pause_the_campaign_and_resume_continues(
    tmp_path: Path, engine: Engine, db_url: str, server: LedgerSMTPServer, rejecting: Rejecting
) -> None:
    recipients = 200
    launch(engine, _campaign(tmp_path / "c", recipients), now=LAUNCH)  # the default threshold

    _send(engine, server)

    counts = _counts(engine)
    failed = counts.get("failed", 0)
    doc = _status(db_url)
    assert doc["status"] == "paused"
    reason = doc["pause_reason"]
    assert reason.startswith("paused automatically: ")
    # Paused on the batch that reached 20 failures of 20 finished sends. One committed batch
    # may carry several failures, so the pause may count more than 20 ("21 of the last 21");
    # after it, only the sends already under way (at most one per concurrent slot) finish.
    counted = re.search(r"paused automatically: (\d+) of the last \1 sends failed", reason)
    assert counted is not None, reason
    at_pause = int(counted.group(1))
    assert 20 <= at_pause <= failed <= at_pause + CONCURRENCY, (at_pause, counts)
    assert counts.get("sent", 0) == 0
    assert counts.get("pending", 0) == recipients - failed, counts  # nothing else touched
    assert server.accepted_ids() == []

    assert "sends failed permanently" in reason
    assert "(most common: 550 DATA: 5.7.1 Message refused (injected fault))" in reason
    text = cli(db_url, "status")
    assert text.exit_code == 0
    assert "paused automatically" in " ".join(text.output.split())
    assert "herald resume brake" in text.output

    resumed = cli(db_url, "resume", "brake")
    assert resumed.exit_code == 0, resumed.output
    assert "brake: paused → active (was paused automatically:" in " ".join(resumed.output.split())
    doc = _status(db_url)
    assert (doc["status"], doc["pause_reason"]) == ("active", None)

    # After the resume the server rejects five more, then accepts. Counted with the old
    # failures, the last 100 sends would be well over 20 % failed; counted afresh, 5 < min.
    rejecting.reject_next = 5
    _send(engine, server)

    counts = _counts(engine)
    assert counts == {"failed": failed + 5, "sent": recipients - failed - 5}, counts
    assert len(server.accepted_ids()) == recipients - failed - 5
    assert _status(db_url)["status"] in ("active", "completed")


def test_pause_on_errors_off_sends_to_the_end(
    tmp_path: Path, engine: Engine, db_url: str, server: LedgerSMTPServer
) -> None:
    launch(engine, _campaign(tmp_path / "c", 40, pause="pause_on_errors: off"), now=LAUNCH)
    _send(engine, server)
    assert _counts(engine) == {"failed": 40}
    doc = _status(db_url)
    assert doc["pause_reason"] is None
    assert doc["status"] != "paused"


def test_a_custom_threshold_tolerates_failures_below_it(
    tmp_path: Path, engine: Engine, db_url: str, server: LedgerSMTPServer, rejecting: Rejecting
) -> None:
    """min 8: seven rejections among 60 sends are tolerated; the campaign finishes."""
    pause = "pause_on_errors: {ratio: 0.1, over: 50, min: 8}"
    launch(engine, _campaign(tmp_path / "c", 60, pause=pause), now=LAUNCH)
    rejecting.reject_next = 7
    _send(engine, server)
    assert _counts(engine) == {"failed": 7, "sent": 53}
    assert _status(db_url)["pause_reason"] is None


def test_several_worker_processes_pause_the_campaign_once(
    tmp_path: Path, engine: Engine, db_url: str, server: LedgerSMTPServer
) -> None:
    recipients, workers = 300, 3
    pause = "pause_on_errors: {ratio: 0.2, over: 100, min: 10}"
    launch(engine, _campaign(tmp_path / "c", recipients, pause=pause), now=LAUNCH)
    command = [
        str(HERALD), "worker", "--until-idle", "--json",
        "--database-url", db_url,
        "--smtp-url", f"smtp://{server.host}:{server.port}",
        "--concurrency", str(CONCURRENCY), "--poll", "0.05", "--retry-base", "0.01",
    ]  # fmt: skip
    processes = [
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(workers)
    ]
    logs = []
    for process in processes:
        _, stderr = process.communicate(timeout=120)
        assert process.returncode == 0, stderr
        logs.append(stderr)

    counts = _counts(engine)
    failed = counts.get("failed", 0)
    # Each worker can finish what it had under way when another one paused the campaign.
    assert 10 <= failed <= 10 + workers * CONCURRENCY, counts
    assert counts.get("pending", 0) == recipients - failed, counts
    # The pending jobs were never attempted: the audience is intact for after the fix.
    assert all(attempts == 0 for _, attempts in _claims_and_attempts(engine))
    doc = _status(db_url)
    assert doc["status"] == "paused"
    assert doc["pause_reason"].startswith("paused automatically: ")
    # One worker paused it (the pause is conditional on the campaign being active) and said so.
    said = [line for log in logs for line in log.splitlines() if "paused automatically" in line]
    assert len(said) == 1, logs


# Records every module loaded on a commit lane (threads herald-db-N) while herald's CLI runs.
LANE_IMPORTS = """
import sys, threading
loaded = []
def on_import(event, args):
    if event == "import" and threading.current_thread().name.startswith("herald-db-"):
        loaded.append(args[0])
sys.addaudithook(on_import)
sys.argv = ["herald", *sys.argv[1:]]
from herald.cli import main
try:
    main()
except SystemExit:
    pass
print("lane imports:", *sorted(set(loaded)), file=sys.stderr)
"""


def test_a_worker_loads_no_module_inside_its_transactions(
    tmp_path: Path, engine: Engine, db_url: str, server: LedgerSMTPServer
) -> None:
    """A commit lane runs transactions; a module loaded there (at a campaign's first failure,
    the pause setting's parser once was: about 0.3 s cold) holds the transaction, the lane and
    the campaign's row lock while other workers go on failing sends. Sends, failures and the
    pause itself must find everything they need already loaded. The campaign has a rate, so
    its T4s take their slots in the lane as well (``SlotThenStart``)."""
    launch(engine, _campaign(tmp_path / "c", 40, pause="rate: 1000/s"), now=LAUNCH)
    stderr = probe_stderr(
        LANE_IMPORTS,
        *("worker", "--until-idle", "--smtp-url", f"smtp://{server.host}:{server.port}"),
        *("--concurrency", str(CONCURRENCY), "--poll", "0.05", "--retry-base", "0.01"),
        database_url=db_url,
    )
    assert _status(db_url)["status"] == "paused"  # failures, the judgment and the pause ran
    lines = [line for line in stderr.splitlines() if line.startswith("lane imports:")]
    assert lines == ["lane imports:"], lines
