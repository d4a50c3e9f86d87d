"""Real scheduler processes (docs/design.md §7): two `herald scheduler`s and three `herald worker`s
on one PostgreSQL database, schedulers SIGKILLed at random and restarted, and every occurrence
materialised once and mailed once per recipient, counted at a real SMTP server's ledger;
`herald run` on the embedded SQLite database, picking up a campaign launched while it runs; and
SIGTERM in the middle of a pass (it finishes), twice (exit 130; the next pass resumes), sent
while the pass is held after its first fan-out batch (tests/support/scheduler_process.py).

Verdicts do not depend on the machine's speed: the runs end when the database says the work is
done (or stops making progress for a long time), and the expected fires and Message-IDs are
computed here from the campaign file, never read back from Herald.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dispatch.keys import KeyTuple, message_id
from dispatch.models import send_job
from scheduler.models import trigger_fire_table
from tests.support.campaign_files import write_audience
from tests.support.paths import HERALD, REPO_ROOT
from tests.support.scheduler_process import PAUSED
from tests.support.smtp_server import LedgerSMTPServer

TERMINAL = ("sent", "failed", "cancelled", "in_doubt")
# What each command says on stderr once a SIGTERM would be handled gracefully. A worker says
# nothing at start; here the workers run for the whole test before they are stopped.
READY = {"scheduler": "scheduler running", "worker": ""}
STALL = 90.0  # no progress for this long fails the run (a loaded machine needs far less)
CAP = 600.0  # and the run never lasts longer than this

SCHEDULED = """\
name: {name}
from: "Herald Tests <news@herald.test>"
audience: people.csv
schedule:
  every: {every}
  start: "{start}"
  end: "{end}"
  catch_up: all
  max_catch_up_age: 1h
steps:
  - id: ping
    subject: "Ping {{{{ name }}}}"
    text: "Hello {{{{ name }}}} from {{{{ city }}}}."
"""

ONE_SHOT = """\
name: {name}
from: "Herald Tests <news@herald.test>"
audience: people.csv
start_at: "{start}"
steps:
  - id: hello
    subject: "Hello {{{{ name }}}}"
    text: "Hello {{{{ name }}}}."
  - id: again
    after: 0
    subject: "Again, {{{{ name }}}}"
    text: "Again {{{{ name }}}}."
"""


def iso(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def whole_seconds_after(seconds: float) -> datetime:
    return (datetime.now(UTC) + timedelta(seconds=seconds + 1)).replace(microsecond=0)


def herald(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(HERALD), *args], capture_output=True, text=True, timeout=120, check=False
    )


@dataclass
class Service:
    """One long-running herald process, its stderr kept in a file for the failure message.

    ``warm``: that many spares are kept started ahead of need, importing or done with it
    (tests/support/warm_herald.py); each start tells the oldest to go and starts another, so
    a restart after a kill runs the command without waiting for its imports. ``command`` is
    then the arguments after ``herald``.
    """

    name: str
    command: list[str]
    log_dir: Path
    warm: int = 0
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0
    logs: list[Path] = field(default_factory=list)
    spares: list[tuple[subprocess.Popen[bytes], Path]] = field(default_factory=list)

    def start(self) -> None:
        self.starts += 1
        if not self.warm:
            self.process, log = self._spawn(self.command, self.starts)
            self.logs.append(log)
            return
        while len(self.spares) < self.warm:  # the first start: spares for this one and on
            self.spares.append(self._spawn(WARM + self.command, self.starts + len(self.spares)))
        self.process, log = self.spares.pop(0)
        self.logs.append(log)
        assert self.process.stdin is not None
        self.process.stdin.write(b"go\n")
        self.process.stdin.close()
        self.spares.append(self._spawn(WARM + self.command, self.starts + self.warm))

    def _spawn(self, command: list[str], n: int) -> tuple[subprocess.Popen[bytes], Path]:
        log = self.log_dir / f"{self.name}.{n}.err"
        with log.open("wb") as stderr:
            process = subprocess.Popen(
                command,
                stdin=subprocess.PIPE if self.warm else subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                cwd=REPO_ROOT,
            )
        return process, log

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def drop_spares(self) -> None:
        for spare, _ in self.spares:
            spare.kill()
            spare.wait()
            if spare.stdin is not None:
                spare.stdin.close()
        self.spares = []

    def signal_stop(self, ready: str) -> None:
        """SIGTERM once it has said ``ready`` (before that a signal would find Python still
        starting, without its handlers)."""
        assert self.process is not None
        wait_until(
            lambda: ready in self.logs[-1].read_text(errors="replace") or not self.alive,
            lambda: self.logs[-1].stat().st_size,
            f"{self.name} never said {ready!r}",
        )
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def terminate(self, ready: str) -> int:
        """``signal_stop``, and its exit code once it has stopped gracefully."""
        self.signal_stop(ready)
        return self.exit_code()

    def exit_code(self) -> int:
        assert self.process is not None
        return self.process.wait(timeout=120)

    def stderr(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')}" for p in self.logs)


# A warm spare's command line, before herald's arguments (tests/support/warm_herald.py).
WARM = [sys.executable, "-m", "tests.support.warm_herald"]


def wait_until(done: Callable[[], bool], progress: Callable[[], object], what: str) -> None:
    """Poll ``done``; fail if ``progress`` stops changing for STALL seconds, or after CAP."""
    started = last_change = time.monotonic()
    last = progress()
    while not done():
        now = time.monotonic()
        current = progress()
        if current != last:
            last, last_change = current, now
        assert now - last_change < STALL, f"{what}: no progress for {STALL:.0f}s at {last}"
        assert now - started < CAP, f"{what}: not done after {CAP:.0f}s"
        time.sleep(0.1)  # the observer's polling cadence, not a verdict


# ------------------------------------------------------------------ two schedulers, three workers

# The shortest `every:` is a minute, so "a fire every few seconds" is CAMPAIGNS schedules of
# `every: 1m` whose starts are STAGGER seconds apart: each fires twice (its start, a minute
# later). The campaigns are registered (through the launch's clock seam) a minute before their
# starts, and their starts lie a minute in the past when the processes start: the first fires
# are all overdue, caught up by schedulers being killed and restarted, and the second ones
# come due live, one every STAGGER seconds. Both kinds of fire meet the kills, and the run
# waits for half a minute of real time instead of a minute and a half.
CAMPAIGNS = 10
STAGGER = 3
FIRES_EACH = 2
RECIPIENTS = 100
# Warm spares per scheduler (Service.warm): restarts come every few seconds and a spare needs
# seconds of CPU to import on a loaded machine; two give each one a head start of two restarts.
SPARES = 2


@dataclass(frozen=True)
class Expected:
    fires: dict[str, list[datetime]]  # campaign -> nominal fire times
    message_ids: frozenset[str]

    @property
    def last_fire(self) -> datetime:
        return max(max(times) for times in self.fires.values())


def write_schedules(folder: Path, first: datetime) -> tuple[list[Path], Expected]:
    folder.mkdir()
    addresses = write_audience(folder / "people.csv", RECIPIENTS)
    paths, fires_of = [], {}
    for k in range(CAMPAIGNS):
        name = f"ticker{k:02d}"
        start = first + timedelta(seconds=STAGGER * k)
        # The end sits between the second and the third fire: no boundary to argue about.
        end = start + timedelta(seconds=60 * FIRES_EACH - 30)
        path = folder / f"{name}.yaml"
        path.write_text(SCHEDULED.format(name=name, every="1m", start=iso(start), end=iso(end)))
        paths.append(path)
        fires_of[name] = [start + timedelta(minutes=n) for n in range(FIRES_EACH)]
    ids = frozenset(
        message_id(KeyTuple(name, "ping", at, address).key(), "herald.test")
        for name, times in fires_of.items()
        for at in times
        for address in addresses
    )
    return paths, Expected(fires_of, ids)


def all_fires(engine: Engine) -> list[tuple[str, datetime, str]]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(
                trigger_fire_table.c.campaign,
                trigger_fire_table.c.nominal_at,
                trigger_fire_table.c.state,
            )
        ).all()
    return [(row.campaign, row.nominal_at, row.state) for row in rows]


def all_job_states(engine: Engine) -> Counter[str]:
    with engine.connect() as conn:
        return Counter(conn.execute(sa.select(send_job.c.state)).scalars())


def _watch_for_due(engine: Engine, campaign: str, *, until: datetime) -> bool:
    """Poll until ``campaign`` has a fire decided but not fanned out (True), or ``until``."""
    query = sa.select(sa.func.count()).where(
        trigger_fire_table.c.campaign == campaign, trigger_fire_table.c.state == "due"
    )
    with engine.connect() as conn:
        while datetime.now(UTC) < until:
            if conn.execute(query).scalar_one():
                return True
            conn.rollback()  # a fresh snapshot for the next look
    return False


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_two_schedulers_killed_at_random_fire_each_occurrence_once(
    tmp_path: Path, db_url: str, engine: Engine, smtp_server: LedgerSMTPServer
) -> None:
    from herald.app.launch import launch

    rng = random.Random(20260329)
    first = whole_seconds_after(6) - timedelta(minutes=1)  # the first fires are overdue
    paths, expected = write_schedules(tmp_path / "campaigns", first)
    registered = first - timedelta(minutes=1)
    for path in paths:
        # Nothing is due at registration; the catch-up is the schedulers' job.
        assert launch(engine, path, clock=lambda: registered).fanout.new_jobs == 0
    smtp_url = f"smtp://{smtp_server.host}:{smtp_server.port}"
    schedulers = [
        Service(
            f"scheduler{i}",
            ["scheduler", "--database-url", db_url, "--tick", "1"],
            tmp_path,
            warm=SPARES,
        )
        for i in (1, 2)
    ]
    worker = "worker --concurrency 8 --poll 0.05 --recovery-interval 0.5 --retry-base 0.05"
    workers = [
        Service(
            f"worker{i}",
            [str(HERALD), *worker.split(), "--database-url", db_url, "--smtp-url", smtp_url],
            tmp_path,
        )
        for i in (1, 2, 3)
    ]
    everyone = schedulers + workers
    total_fires = CAMPAIGNS * FIRES_EACH
    try:
        for service in everyone:
            service.start()
        # Around each fire, SIGKILL a scheduler the moment the fire is decided but not yet
        # fanned out (a `due` row: a pass is inside its fan-out), or at the end of the window
        # if that moment was missed (at once for the overdue fires, which the restarted
        # schedulers are catching up); sometimes both at once, as a host restart would. Then
        # restart them: from warm spares (Service.warm), so a restart does not wait for
        # imports the spare has had time to finish (cold, on a loaded machine, the imports
        # outlasted the gap between kills: no kill met a running scheduler, and the catch-up
        # only began with the last start, after the loop).
        kills, mid_fanout = 0, 0
        for campaign, fire in sorted(
            ((c, at) for c, times in expected.fires.items() for at in times),
            key=lambda item: item[1],
        ):
            time.sleep(max(0.0, (fire - datetime.now(UTC)).total_seconds() - 0.05))  # pacing
            caught = _watch_for_due(engine, campaign, until=fire + timedelta(seconds=1))
            mid_fanout += caught
            victims = schedulers if rng.random() < 0.2 else [rng.choice(schedulers)]
            for victim in victims:
                if victim.alive:
                    victim.kill()
                    kills += 1
            time.sleep(rng.uniform(0.0, 1.0))
            for service in schedulers:
                if not service.alive:
                    service.start()

        def settled() -> bool:
            done = [fire for fire in all_fires(engine) if fire[2] == "done"]
            states = all_job_states(engine)
            busy = sum(n for state, n in states.items() if state not in TERMINAL)
            return (
                len(done) >= total_fires
                and busy == 0
                and sum(states.values()) >= len(expected.message_ids)
            )

        wait_until(
            settled,
            lambda: (len(all_fires(engine)), all_job_states(engine)),
            "the schedules did not settle",
        )
        # All stopped together: each one's graceful stop is the same, and they take their
        # shutdown time side by side rather than one after another.
        for service in everyone:
            service.signal_stop(READY[service.name.rstrip("0123456789")])
        for service in everyone:
            code = service.exit_code()
            assert code == 0, f"{service.name} exited {code}\n{service.stderr()}"
    finally:
        for service in everyone:
            service.drop_spares()
            if service.alive:
                service.kill()

    assert kills >= CAMPAIGNS * FIRES_EACH
    # How many kills were aimed at a fan-out under way (timing decides; not a verdict).
    print(f"SCHEDULERS: {kills} kills, {mid_fanout} aimed at a fan-out under way")
    for service in everyone:
        assert "Traceback" not in service.stderr(), service.stderr()
    # Each fire decided once (UNIQUE(campaign, nominal_at)), none missed, none skipped.
    fired = sorted(all_fires(engine))
    assert [(c, at) for c, at, _ in fired] == sorted(
        (c, at) for c, times in expected.fires.items() for at in times
    )
    assert {state for _, _, state in fired} == {"done"}
    # One job per recipient and occurrence, every one sent; each Message-ID accepted once.
    assert all_job_states(engine) == {"sent": len(expected.message_ids)}
    accepted = smtp_server.accepted_ids()
    assert [mid for mid, n in Counter(accepted).items() if n > 1] == []
    assert set(accepted) == expected.message_ids


# ------------------------------------------------------------------ herald run


def herald_run(
    tmp_path: Path, db_url: str, smtp_server: LedgerSMTPServer, *options: str
) -> Service:
    """``herald run`` on ``db_url``, sending to ``smtp_server``, passing every half second."""
    smtp_url = f"smtp://{smtp_server.host}:{smtp_server.port}"
    command = [str(HERALD), "run", "--tick", "0.5", "--poll", "0.05", *options]
    return Service("run", [*command, "--database-url", db_url, "--smtp-url", smtp_url], tmp_path)


def test_herald_run_sends_a_campaign_launched_while_it_runs_and_stops_on_sigterm(
    tmp_path: Path, smtp_server: LedgerSMTPServer
) -> None:
    db_url = f"sqlite:///{tmp_path / 'herald.db'}"
    folder = tmp_path / "campaign"
    folder.mkdir()
    addresses = write_audience(folder / "people.csv", 25)
    run = herald_run(tmp_path, db_url, smtp_server, "--retry-base", "0.05")
    run.start()
    try:
        # Launched after `herald run` started: the next pass picks it up, no restart.
        start = whole_seconds_after(2)
        path = folder / "campaign.yaml"
        path.write_text(ONE_SHOT.format(name="hello", start=iso(start)))
        launched = herald("launch", str(path), "--database-url", db_url)
        assert launched.returncode == 0, launched.stderr
        expected = {
            message_id(KeyTuple("hello", step, start, address).key(), "herald.test")
            for step in ("hello", "again")
            for address in addresses
        }
        wait_until(
            lambda: len(smtp_server.accepted_ids()) >= len(expected),
            lambda: len(smtp_server.accepted_ids()),
            "herald run did not deliver the campaign",
        )
        assert run.terminate(READY["scheduler"]) == 0, run.stderr()
    finally:
        if run.alive:
            run.kill()
    accepted = smtp_server.accepted_ids()
    assert sorted(accepted) == sorted(expected)  # each once
    log = run.stderr()
    assert "stopping" in log
    assert "Traceback" not in log


# ------------------------------------------------------------------ signals during a pass

# The scheduler here is tests/support/scheduler_process.py: `herald scheduler`'s loop, signal
# handling and lines, whose fan-out pauses after its first committed batch until the signal
# has been handled. So the signal lands mid-fan-out for certain and a few batches suffice
# (signalled while running freely, the fan-out had to be 10,000 recipients long, and the
# landing was still a matter of timing). BIG spans several batches of each step.
BIG = 1_200  # recipients: 3 batches of scheduler.fanout.BATCH_SIZE per step
BIG_JOBS = 2 * BIG  # ONE_SHOT has two steps
PAUSING = [sys.executable, "-m", "tests.support.scheduler_process"]


def big_one_shot(tmp_path: Path, engine: Engine) -> datetime:
    """A one-shot for BIG recipients, due a minute ago, launched before it was due: the first
    scheduler pass fires it. Returns its time."""
    from tests.support.schedules import launch_at

    due = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=1)
    folder = tmp_path / "big"
    folder.mkdir()
    write_audience(folder / "people.csv", BIG)
    path = folder / "campaign.yaml"
    path.write_text(ONE_SHOT.format(name="big", start=iso(due)))
    assert launch_at(engine, path, due - timedelta(days=1)).fanout.new_jobs == 0
    return due


def fire_states(engine: Engine) -> list[str]:
    return [state for _, _, state in all_fires(engine)]


def job_count(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(send_job)).scalar_one())


def wait_for_pause(service: Service, engine: Engine) -> None:
    """Until the fan-out has paused after its first batch: its fire decided, not fanned out."""
    wait_until(
        lambda: PAUSED in service.stderr() or not service.alive,
        lambda: (len(service.stderr()), fire_states(engine)),
        "the fan-out did not pause after its first batch",
    )
    assert service.alive, service.stderr()
    assert fire_states(engine) == ["due"]
    assert 0 < job_count(engine) < BIG_JOBS


def test_sigterm_in_the_middle_of_a_pass_lets_it_finish(
    tmp_path: Path, db_url: str, engine: Engine
) -> None:
    due = big_one_shot(tmp_path, engine)
    service = Service("scheduler", [*PAUSING, db_url], tmp_path)
    service.start()
    try:
        wait_for_pause(service, engine)  # the fire is decided and its fan-out under way: stop
        assert service.terminate(READY["scheduler"]) == 0, service.stderr()
    finally:
        if service.alive:
            service.kill()
    log = service.stderr()
    assert "stopping: finishing the current pass" in log
    assert f"big: fired {iso(due)}, {BIG_JOBS} new job(s)" in log
    assert fire_states(engine) == ["done"]
    assert job_count(engine) == BIG_JOBS


def test_a_second_signal_exits_at_once_and_the_next_pass_resumes_the_fan_out(
    tmp_path: Path, db_url: str, engine: Engine
) -> None:
    due = big_one_shot(tmp_path, engine)
    service = Service("scheduler", [*PAUSING, db_url, "--hold"], tmp_path)
    service.start()
    try:
        # Inside the fan-out proper (the audience snapshot is complete once jobs appear): a
        # pass interrupted while reading the audience would be resumed by another scheduler
        # only once the reader is presumed dead (scheduler.passes.TAKEOVER_AFTER).
        wait_for_pause(service, engine)
        assert service.process is not None
        service.process.send_signal(signal.SIGTERM)
        # Signals sent back to back can coalesce into one: wait until the first was handled.
        wait_until(
            lambda: "stopping" in service.stderr(),
            lambda: len(service.stderr()),
            "the first SIGTERM was not acknowledged",
        )
        service.process.send_signal(signal.SIGTERM)
        assert service.process.wait(timeout=60) == 130
    finally:
        if service.alive:
            service.kill()
    assert fire_states(engine) == ["due"]  # left mid-fan-out
    written = job_count(engine)
    assert 0 < written < BIG_JOBS

    again = herald("scheduler", "--once", "--database-url", db_url)
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == f"big: fired {iso(due)}, {BIG_JOBS - written} new job(s)"
    assert fire_states(engine) == ["done"]
    with engine.connect() as conn:
        jobs = conn.execute(sa.select(send_job.c.step, send_job.c.mailbox)).all()
    assert len(jobs) == len(set(jobs)) == BIG_JOBS
