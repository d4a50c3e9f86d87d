"""The chaos harness: real worker processes, real kills, a real SMTP server, and a verdict.

Effects are counted where the world sees them: the SMTP server appends each accepted
Message-ID to an fsync'd ledger *before* replying 250. The expected key set is computed here
from the campaign definition, never read back from Herald. At quiescence:

- no Message-ID accepted twice;
- every expected key exists exactly once, in a terminal state;
- every ``sent`` key is in the ledger, and every ledger entry is ``sent`` or ``in_doubt``;
- every ``in_doubt`` is explained by a kill, pause or server fault inside DATA;
- ``herald status --json`` agrees with the database.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from campaigns.control import register
from campaigns.spec import load_campaign
from dispatch.keys import KeyTuple, message_id
from dispatch.models import send_event, send_job
from herald.db import create_engine
from scheduler.fanout import materialise
from tests.support.campaign_files import write_campaign
from tests.support.smtp_server import Fault, LedgerSMTPServer, read_ledger_entries

HERALD = str(Path(sys.executable).parent / "herald")
TERMINAL = {"sent", "failed", "cancelled", "in_doubt"}
DATA_FAULTS = {Fault.DROP_AFTER_STORE, Fault.DROP_BEFORE_STORE, Fault.DELAY_REPLY}

CRASH_POINTS = (
    "after_claim_commit:0.01,after_rcpt:0.001,before_t4_commit:0.005,after_t4_commit:0.001,"
    "after_data_write:0.001,after_250_before_t5:0.001,after_t5_commit:0.001"
)


@dataclass
class ChaosConfig:
    db_url: str
    recipients: int = 700  # x 3 steps
    workers: int = 3
    concurrency: int = 8
    lease: float = 3.0
    seed: int = 7
    random_kills: int = 8
    crash_points: str | None = CRASH_POINTS
    sigstop: bool = True
    host_restart: bool = True
    db_restart: bool = False
    server_faults: bool = True
    unguarded: bool = False  # the naive variant: T4 guards off
    deadline: float = 240.0  # seconds; the run fails if not quiescent by then


@dataclass
class ChaosResult:
    backend: str
    messages: int = 0
    kills: Counter[str] = field(default_factory=Counter)
    crash_points_hit: Counter[str] = field(default_factory=Counter)
    stops: int = 0
    db_restarts: int = 0
    duplicates: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    states: Counter[str] = field(default_factory=Counter)
    in_doubt_causes: Counter[str] = field(default_factory=Counter)
    unexplained_in_doubt: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not (self.duplicates or self.lost or self.unexplained_in_doubt or self.problems)

    def summary(self) -> str:
        kills = ", ".join(f"{k}={v}" for k, v in sorted(self.kills.items())) or "none"
        causes = ", ".join(f"{k}={v}" for k, v in sorted(self.in_doubt_causes.items())) or "-"
        return (
            f"CHAOS {self.backend}: messages={self.messages} kills={sum(self.kills.values())} "
            f"({kills}) crash_points_hit={sum(self.crash_points_hit.values())} "
            f"stops={self.stops} db_restarts={self.db_restarts} "
            f"duplicates={len(self.duplicates)} lost={len(self.lost)} "
            f"in_doubt={self.states['in_doubt']} ({causes}) "
            f"sent={self.states['sent']} failed={self.states['failed']} "
            f"unexplained={len(self.unexplained_in_doubt)} problems={len(self.problems)} "
            f"in {self.seconds:.1f}s"
        )


class FaultLog:
    """A seeded server fault plan that remembers what it did to each Message-ID."""

    def __init__(self, seed: int, enabled: bool) -> None:
        self.seed = seed
        self.enabled = enabled
        self.faults: dict[str, list[Fault]] = {}
        self._lock = threading.Lock()

    def __call__(self, key: str, n: int) -> Fault:
        if not self.enabled or not key.startswith("<"):
            return Fault.ACCEPT
        draw = random.Random(f"{self.seed}:{key}:{n}").random()
        fault = Fault.ACCEPT
        for threshold, candidate in (
            (0.010, Fault.DROP_AFTER_STORE),
            (0.020, Fault.DROP_BEFORE_STORE),
            (0.025, Fault.DELAY_REPLY),
            (0.055, Fault.TEMPFAIL),
            (0.060, Fault.REJECT),
        ):
            if draw < threshold:
                fault = candidate
                break
        with self._lock:
            self.faults.setdefault(key, []).append(fault)
        return fault


@dataclass
class WorkerProcess:
    process: subprocess.Popen[bytes]
    stderr_path: Path
    owner_pid: int
    fate: str | None = None  # why it died, when we killed it


class Chaos:
    def __init__(self, tmp: Path, config: ChaosConfig) -> None:
        self.tmp = tmp
        self.config = config
        self.rng = random.Random(config.seed)
        self.backend = "postgresql" if config.db_url.startswith("postgres") else "sqlite"
        self.result = ChaosResult(self.backend)
        self.workers: list[WorkerProcess] = []
        self.dead: list[WorkerProcess] = []
        self.paused_pids: set[int] = set()
        self.paused: list[tuple[WorkerProcess, float]] = []
        self.spawned = 0

    # ------------------------------------------------------------------ setup

    def launch(self) -> tuple[datetime, list[str]]:
        path, addresses = write_campaign(self.tmp / "campaign", recipients=self.config.recipients)
        engine = create_engine(self.config.db_url)
        try:
            loaded = load_campaign(path)
            launched_at = register(engine, loaded, now=datetime.now(UTC)).campaign.launched_at
            created = materialise(engine, loaded, launched_at).new_jobs
        finally:
            engine.dispose()
        assert created == self.config.recipients * 3
        return launched_at, addresses

    def spawn(self, smtp_url: str) -> None:
        self.spawned += 1
        stderr_path = self.tmp / f"worker{self.spawned}.err"
        env = dict(os.environ)
        env.pop("HERALD_CRASH_AT", None)
        if self.config.crash_points:
            env["HERALD_CRASH_AT"] = f"{self.config.crash_points},seed={self.rng.randrange(10**9)}"
        if self.config.unguarded:
            env["HERALD_TEST_UNGUARDED_T4"] = "1"
        command = [
            HERALD, "worker", "--until-idle",
            "--database-url", self.config.db_url,
            "--smtp-url", smtp_url,
            "--concurrency", str(self.config.concurrency),
            "--lease", str(self.config.lease),
            "--recovery-interval", "0.5",
            "--retry-base", "0.05",
            "--poll", "0.05",
            "--idle-horizon", "60",
            "--shutdown-grace", "5",
        ]  # fmt: skip
        with stderr_path.open("wb") as stderr:
            process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr, env=env)
        self.workers.append(WorkerProcess(process, stderr_path, process.pid))

    # ------------------------------------------------------------------ chaos actions

    def reap(self) -> None:
        for worker in list(self.workers):
            if worker.process.poll() is not None:
                self.workers.remove(worker)
                if worker.fate is None and worker.process.returncode == -signal.SIGKILL:
                    worker.fate = "crash_point"
                self.dead.append(worker)

    def kill(self, worker: WorkerProcess, fate: str) -> None:
        if worker.process.poll() is None:
            worker.fate = fate
            worker.process.send_signal(signal.SIGKILL)
            worker.process.wait()
            self.result.kills[fate] += 1

    def pause(self, worker: WorkerProcess, seconds: float) -> None:
        """SIGSTOP past the lease; ``resume_due`` sends SIGCONT: it comes back as a zombie."""
        if worker.process.poll() is not None:
            return
        self.paused_pids.add(worker.owner_pid)
        worker.process.send_signal(signal.SIGSTOP)
        self.paused.append((worker, time.monotonic() + seconds))
        self.result.stops += 1

    def resume_due(self, *, everyone: bool = False) -> None:
        for worker, resume_at in list(self.paused):
            if everyone or time.monotonic() >= resume_at:
                if worker.process.poll() is None:
                    worker.process.send_signal(signal.SIGCONT)
                self.paused.remove((worker, resume_at))

    def restart_database(self) -> None:
        clusters = sorted(os.listdir("/etc/postgresql")) if os.path.isdir("/etc/postgresql") else []
        if not clusters or shutil.which("pg_ctlcluster") is None:
            self.result.problems.append("cannot restart PostgreSQL: pg_ctlcluster not available")
            return
        subprocess.run(
            [
                "pg_ctlcluster",
                "--skip-systemctl-redirect",
                clusters[-1],
                "main",
                "restart",
                "-m",
                "fast",
            ],
            check=True,
            capture_output=True,
        )
        self.result.db_restarts += 1

    # ------------------------------------------------------------------ the run

    def quiescent(self, engine: sa.Engine) -> bool:
        with engine.connect() as conn:
            busy = conn.execute(
                sa.select(sa.func.count()).where(
                    send_job.c.state.in_(["pending", "claimed", "sending"])
                )
            ).scalar_one()
        return busy == 0

    def run(self) -> ChaosResult:
        cfg = self.config
        started = time.monotonic()
        launched_at, addresses = self.launch()
        faults = FaultLog(cfg.seed, cfg.server_faults)
        server = LedgerSMTPServer(self.tmp / "ledger.txt", fault_plan=faults, delay=4.0)
        server.start()
        # DATA timeout below the server's delayed reply: a delayed 250 becomes in_doubt.
        smtp_url = f"smtp://{server.host}:{server.port}?timeout=5&data_timeout=2"
        engine = create_engine(cfg.db_url)
        try:
            self._drive(engine, smtp_url)
            self.reap()
            self.result.seconds = time.monotonic() - started
            self._verify(engine, launched_at, addresses, server, faults)
        finally:
            for worker in self.workers:
                if worker.process.poll() is None:
                    worker.process.kill()
                    worker.process.wait()
            server.stop()
            engine.dispose()
        return self.result

    def _drive(self, engine: sa.Engine, smtp_url: str) -> None:
        cfg = self.config
        deadline = time.monotonic() + cfg.deadline
        total = cfg.recipients * 3
        # Chaos happens while between these fractions of the jobs are finished.
        plan: list[tuple[float, str]] = []
        plan += [(self.rng.uniform(0.05, 0.8), "kill") for _ in range(cfg.random_kills)]
        if cfg.host_restart:
            plan.append((0.25, "host_restart"))
        if cfg.sigstop:
            plan.append((0.45, "stop"))
        if cfg.db_restart:
            plan.append((0.35, "db_restart"))
        plan.sort()
        for _ in range(cfg.workers):
            self.spawn(smtp_url)
        while time.monotonic() < deadline:
            self.reap()
            self.resume_due()
            done = self._finished(engine)
            quiet = done >= total and self.quiescent(engine)
            # Done when every job is terminal AND every worker has gone idle and exited, so a
            # resumed zombie gets its chance to misbehave before the verdict.
            if quiet and not self.workers and not self.paused:
                return
            # No other chaos while a worker is stopped: it must come back as a zombie.
            while plan and not self.paused and done >= plan[0][0] * total:
                if not self._act(plan[0][1]):
                    break  # nobody alive to act on yet: try again on the next tick
                plan.pop(0)
            # A stopped worker counts as alive: the others carry on around it, as in real life.
            while not quiet and len(self.workers) < cfg.workers:
                self.spawn(smtp_url)
            time.sleep(0.05)  # the controller's own polling cadence
        self.result.problems.append(f"not quiescent after {cfg.deadline:.0f}s")
        self.resume_due(everyone=True)
        for worker in self.workers:
            self.kill(worker, "deadline")

    def _finished(self, engine: sa.Engine) -> int:
        try:
            with engine.connect() as conn:
                return int(
                    conn.execute(
                        sa.select(sa.func.count()).where(send_job.c.state.in_(list(TERMINAL)))
                    ).scalar_one()
                )
        except sa.exc.OperationalError:
            return 0  # the database is restarting

    def _act(self, action: str) -> bool:
        """Apply one chaos action; False when there is no live worker to apply it to."""
        live = [w for w in self.workers if w.process.poll() is None]
        if action == "db_restart":
            self.restart_database()
            return True
        if not live:
            return False
        if action == "kill":
            self.kill(self.rng.choice(live), "sigkill")
        elif action == "stop":
            self.pause(self.rng.choice(live), self.config.lease * 2 + 2)
        elif action == "host_restart":
            for worker in live:
                self.kill(worker, "host_restart")
        return True

    # ------------------------------------------------------------------ the verdict

    def _verify(
        self,
        engine: sa.Engine,
        launched_at: datetime,
        addresses: list[str],
        server: LedgerSMTPServer,
        faults: FaultLog,
    ) -> None:
        result = self.result
        for worker in self.dead:
            for line in worker.stderr_path.read_text(errors="replace").splitlines():
                if line.startswith("HERALD_CRASH "):
                    result.crash_points_hit[line.split()[1]] += 1
                    worker.fate = "crash_point"
        result.kills["crash_point"] += sum(1 for w in self.dead if w.fate == "crash_point")

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
            claims = {
                (e.job_id, e.token): e.actor
                for e in conn.execute(
                    sa.select(send_event.c.job_id, send_event.c.token, send_event.c.actor).where(
                        send_event.c.to_state == "claimed"
                    )
                )
            }
        ledger = read_ledger_entries(server.ledger_path)
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

        troubled_pids = {w.owner_pid for w in self.dead if w.fate} | self.paused_pids
        for row in rows.values():
            if row.state != "in_doubt":
                continue
            cause = self._explain(row, claims, faults, troubled_pids)
            if cause is None:
                result.unexplained_in_doubt.append(f"{row.key[:12]}: {row.in_doubt_reason}")
            else:
                result.in_doubt_causes[cause] += 1

        snapshot = self._status_json()
        if snapshot is not None:
            for state, n in snapshot["totals"].items():
                if n != result.states.get(state, 0):
                    result.problems.append(
                        f"status --json says {state}={n}, database says otherwise"
                    )

    def _explain(
        self,
        row: Any,
        claims: dict[tuple[int, int], str],
        faults: FaultLog,
        troubled_pids: set[int],
    ) -> str | None:
        if any(f in DATA_FAULTS for f in faults.faults.get(row.message_id, [])):
            return "server_fault_in_data"
        owner = claims.get((row.id, row.lease_token), "")
        parts = owner.split(":")
        pid = int(parts[1]) if len(parts) >= 2 and parts[1].isdigit() else -1
        if pid in troubled_pids and row.in_doubt_reason == "lease expired during send":
            return "worker_killed_or_paused_in_data"
        return None

    def _status_json(self) -> dict[str, Any] | None:
        completed = subprocess.run(
            [HERALD, "status", "--json", "--database-url", self.config.db_url],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if completed.returncode != 0:
            self.result.problems.append(f"herald status failed: {completed.stderr.strip()}")
            return None
        document: dict[str, Any] = json.loads(completed.stdout)
        return document
