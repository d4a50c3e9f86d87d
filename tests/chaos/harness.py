"""The chaos harness: real worker processes, real kills, a real SMTP server, and a verdict.

Effects are counted where the world sees them: the SMTP server appends each accepted
Message-ID to an fsync'd ledger *before* replying 250. The expected key set is computed here
from the campaign definition, never read back from Herald. At quiescence:

- no Message-ID accepted twice;
- every expected key exists exactly once, in a terminal state;
- every ``sent`` key is in the ledger, and every ledger entry is ``sent`` or ``in_doubt``;
- every ``in_doubt`` is explained by evidence (``tests/chaos/evidence.py``): the journal shows
  T4 under its lease and why it ended in doubt, and a kill, pause, lost lease, server fault or
  client timeout inside DATA accounts for it;
- ``herald status --json`` agrees with the database.

Nothing in the verdict depends on how fast the machine is: the run ends when the system is
quiet (or stops making progress), a stopped worker resumes once its jobs have been finished by
the others, and in-doubt causes are read from what the product and the server recorded.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import sqlalchemy as sa

from campaigns.control import register
from campaigns.spec import load_campaign
from dispatch.models import send_job
from herald.db import create_engine
from scheduler.fanout import materialise
from tests.chaos.evidence import pid_of
from tests.chaos.model import TERMINAL, ChaosResult, FaultLog, WorkerProcess
from tests.chaos.verdict import verify
from tests.support.campaign_files import write_campaign
from tests.support.smtp_server import LedgerSMTPServer

ROOT = Path(__file__).resolve().parents[2]  # where ``python -m tests.chaos.worker`` resolves
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
    # Restarts the database server once, mid-run (PostgreSQL: a private cluster's restart,
    # tests/support/pg_cluster.py; never the shared server other tests are using). None: no restart.
    db_restart: Callable[[], None] | None = None
    server_faults: bool = True
    unguarded: bool = False  # the naive variant: T4 guards off
    # The naive variant's pause (with ``sigstop`` off): the first worker to record this many
    # outcomes SIGSTOPs itself right after its next claim commits (``StopAfterClaim``), so the
    # zombie surely holds claims it has not started, whatever the machine's load.
    stop_after_claim: int | None = None
    # The run fails if no job finishes and no worker exits for this long (a stall), and in any
    # case after ``deadline``: both far above what a loaded machine needs, since progress, not
    # wall time, is what is being judged.
    stall_timeout: float = 180.0
    deadline: float = 1800.0
    # The naive variant never goes quiet (its zombie leaves rows in sending), so its run ends by
    # a stall: this much without progress once the worker has been stopped. Before the stop the
    # stall_timeout above applies, so a loaded machine's slow start is not mistaken for the end
    # (a 20 s stall limit from the start once ended a run at 8 of 450 messages, before any stop).
    stall_after_stop: float | None = None
    # A stopped worker may hold row locks (inside a transaction): the others' recovery skips
    # those rows, and on SQLite (one writer) everyone waits. If nothing finishes for this long
    # while it is stopped, it is resumed anyway, late enough that its leases have long expired,
    # so it still comes back as a zombie.
    blocked_grace: float = 15.0


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
        # (worker, not before, job ids it held when stopped)
        self.paused: list[tuple[WorkerProcess, float, frozenset[int]]] = []
        self.spawned = 0
        self.last_progress = time.monotonic()  # when a job last finished (or a worker exited)
        self.faults = FaultLog(config.seed, config.server_faults)
        self.zombie_marker = tmp / "zombie.marker"  # StopAfterClaim's: who stopped, holding what

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
        stdout_path = self.tmp / f"worker{self.spawned}.json"
        # ``herald worker`` with the test instruments: tests/chaos/worker.py.
        command = [
            sys.executable, "-m", "tests.chaos.worker", "--until-idle",
            "--database-url", self.config.db_url,
            "--smtp-url", smtp_url,
            "--concurrency", str(self.config.concurrency),
            "--lease", str(self.config.lease),
            "--recovery-interval", "0.5",
            "--retry-base", "0.05",
            "--poll", "0.05",
            "--idle-horizon", "60",
            "--shutdown-grace", "5",
            "--json",  # its final report says whether it lost leases: evidence for the verdict
        ]  # fmt: skip
        if self.config.crash_points:
            seed = self.rng.randrange(10**9)
            command += ["--crash-at", f"{self.config.crash_points},seed={seed}"]
        if (sends := self.config.stop_after_claim) is not None:
            command += ["--stop-after-claim", f"{sends}:{self.zombie_marker}"]
        if self.config.unguarded:
            command.append("--unguarded-t4")
        with stderr_path.open("wb") as stderr, stdout_path.open("wb") as stdout:
            process = subprocess.Popen(command, stdout=stdout, stderr=stderr, cwd=ROOT)
        self.workers.append(WorkerProcess(process, stderr_path, stdout_path, process.pid))

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

    def pause(self, engine: sa.Engine, worker: WorkerProcess, seconds: float) -> bool:
        """SIGSTOP until the others have finished every job it held (and at least ``seconds``).

        ``resume_due`` sends SIGCONT only then, so it always comes back as a zombie whose jobs
        were recovered and completed by someone else, however slowly the machine runs.
        """
        held = self._held_by(engine, worker.owner_pid)
        if not held or worker.process.poll() is not None:
            return False  # nothing to take over, or already gone: pick again on the next tick
        worker.process.send_signal(signal.SIGSTOP)
        if worker.process.poll() is not None:
            return False
        self._stopped(worker, seconds, held)
        return True

    def notice_self_stops(self, engine: sa.Engine, seconds: float) -> None:
        """Count a worker that stopped itself (``stop_after_claim``) as paused, as ``pause``
        does. It holds the claim it had just committed, whose job ids it wrote in the marker:
        read there, since by now the others may have taken some of them back."""
        for worker in self.workers:
            if worker.owner_pid not in self.paused_pids and stopped_by_signal(worker.owner_pid):
                claimed = frozenset(int(i) for i in self.zombie_marker.read_text().split())
                held = claimed | self._held_by(engine, worker.owner_pid)
                self._stopped(worker, seconds, held)

    def _stopped(self, worker: WorkerProcess, seconds: float, held: frozenset[int]) -> None:
        self.paused_pids.add(worker.owner_pid)
        self.paused.append((worker, time.monotonic() + seconds, held))
        self.result.stops += 1

    def resume_due(self, engine: sa.Engine | None, *, everyone: bool = False) -> bool:
        """Resume stopped workers whose jobs are all finished; True if any was resumed."""
        resumed = False
        for entry in list(self.paused):
            worker, not_before, held = entry
            blocked = time.monotonic() - self.last_progress > self.config.blocked_grace
            due = everyone or (
                engine is not None
                and time.monotonic() >= not_before
                and (blocked or self._all_terminal(engine, held))
            )
            if due:
                if worker.process.poll() is None:
                    worker.process.send_signal(signal.SIGCONT)
                self.paused.remove(entry)
                resumed = True
        return resumed

    def _held_by(self, engine: sa.Engine, pid: int) -> frozenset[int]:
        try:
            with engine.connect() as conn:
                rows = conn.execute(
                    sa.select(send_job.c.id, send_job.c.lease_owner).where(
                        send_job.c.state.in_(["claimed", "sending"])
                    )
                ).all()
        except sa.exc.OperationalError:
            return frozenset()  # the database is restarting
        return frozenset(r.id for r in rows if pid_of(r.lease_owner or "") == pid)

    def _all_terminal(self, engine: sa.Engine, job_ids: frozenset[int]) -> bool:
        try:
            with engine.connect() as conn:
                states = conn.execute(
                    sa.select(send_job.c.state).where(send_job.c.id.in_(sorted(job_ids)))
                ).scalars()
                return all(state in TERMINAL for state in states)
        except sa.exc.OperationalError:
            return False

    def restart_database(self) -> None:
        assert self.config.db_restart is not None
        self.config.db_restart()
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
        total = cfg.recipients * 3
        faults = FaultLog(
            cfg.seed, cfg.server_faults, gate_after=int(0.45 * total) if cfg.sigstop else None
        )
        self.faults = faults
        server = LedgerSMTPServer(self.tmp / "ledger.txt", fault_plan=faults, delay=4.0)
        server.start()
        # DATA timeout below the server's delayed reply: a delayed 250 becomes in_doubt.
        smtp_url = f"smtp://{server.host}:{server.port}?timeout=5&data_timeout=2"
        engine = create_engine(cfg.db_url)
        try:
            self._drive(engine, smtp_url)
            self.resume_due(None, everyone=True)
            self.reap()
            self.result.seconds = time.monotonic() - started
            verify(
                self.result,
                engine=engine,
                db_url=cfg.db_url,
                launched_at=launched_at,
                addresses=addresses,
                ledger_path=server.ledger_path,
                faults=faults,
                dead=self.dead,
                paused_pids=self.paused_pids,
            )
        finally:
            faults.gate_open.set()  # a server thread held at the gate must not outlive the run
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
        last_progress, last_done, last_exits = time.monotonic(), -1, -1
        total = cfg.recipients * 3
        pause_for = cfg.lease * 2 + 2  # at least: a stopped worker's leases long expired
        # Chaos happens while between these fractions of the jobs are finished.
        plan: list[tuple[float, str]] = []
        plan += [(self.rng.uniform(0.05, 0.8), "kill") for _ in range(cfg.random_kills)]
        if cfg.host_restart:
            plan.append((0.25, "host_restart"))
        if cfg.db_restart is not None:
            plan.append((0.35, "db_restart"))
        plan.sort()
        for _ in range(cfg.workers):
            self.spawn(smtp_url)
        while time.monotonic() < deadline:
            self.reap()
            resumed = self.resume_due(engine)
            done = self._finished(engine)
            if done != last_done or len(self.dead) != last_exits or resumed:
                last_progress, last_done, last_exits = time.monotonic(), done, len(self.dead)
                self.last_progress = last_progress
            elif time.monotonic() - last_progress > self._stall_limit():
                break
            quiet = done >= total and self.quiescent(engine)
            # Done when every job is terminal AND every worker has gone idle and exited, so a
            # resumed zombie gets its chance to misbehave before the verdict.
            if quiet and not self.workers and not self.paused:
                return
            # The pause waits for the server's gate (every worker is inside DATA), then
            # opens it; see FaultLog.
            if self.faults.gate_reached.is_set() and not self.faults.gate_open.is_set():
                live = [w for w in self.workers if w.process.poll() is None]
                if self.pause(engine, self.rng.choice(live), pause_for) if live else False:
                    self.faults.gate_open.set()
            if cfg.stop_after_claim is not None:
                self.notice_self_stops(engine, pause_for)
            # No other chaos while a worker is stopped: it must come back as a zombie.
            while plan and not self.paused and done >= plan[0][0] * total:
                if not self._act(engine, plan[0][1]):
                    break  # nobody alive to act on yet: try again on the next tick
                plan.pop(0)
            # A stopped worker counts as alive: the others carry on around it, as in real life.
            while not quiet and len(self.workers) < cfg.workers:
                self.spawn(smtp_url)
            time.sleep(0.05)  # the controller's own polling cadence
        self.result.problems.append(
            f"not quiescent: stalled {self._stall_limit():.0f}s at {last_done}/{total} finished"
            f" (or past the {cfg.deadline:.0f}s cap)"
        )
        self.resume_due(None, everyone=True)
        for worker in self.workers:
            self.kill(worker, "deadline")

    def _stall_limit(self) -> float:
        cfg = self.config
        if cfg.stall_after_stop is not None and self.result.stops:
            return cfg.stall_after_stop
        return cfg.stall_timeout

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

    def _act(self, engine: sa.Engine, action: str) -> bool:
        """Apply one chaos action; False when there is no live worker to apply it to."""
        live = [w for w in self.workers if w.process.poll() is None]
        if action == "db_restart":
            self.restart_database()
            return True
        if not live:
            return False
        if action == "kill":
            self.kill(self.rng.choice(live), "sigkill")
        elif action == "host_restart":
            for worker in live:
                self.kill(worker, "host_restart")
        return True


def stopped_by_signal(pid: int) -> bool:
    """Whether the process is stopped (SIGSTOP): its state in /proc/PID/stat is ``T``."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False  # gone
    return stat.rpartition(")")[2].split()[0] == "T"
