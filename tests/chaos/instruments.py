"""What the chaos suite plugs into a worker: named crash points, and a worker without T4 guards.

None of it exists in the product. ``CrashInstrumentation`` is an ``Instrumentation`` that
SIGKILLs the process at a named point with a given probability; ``StopAfterClaim`` SIGSTOPs it
right after a claim commits, so it holds claims it has not started; ``UnguardedStore`` is the
outbox store with T4's guards removed (by id only: no token, no state, no lease check), the
naive worker the suite must catch sending duplicates. ``tests/chaos/worker.py`` builds a worker
with them.
"""

from __future__ import annotations

import asyncio
import math
import os
import random
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path

import sqlalchemy as sa

from dbtypes import db_now
from dispatch.held_leases import HeldLeases
from dispatch.instrumentation import NullInstrumentation
from dispatch.models import send_job
from dispatch.store import ClaimedJob, Lease, OutboxStore
from dispatch.transport import Envelope

POINTS = (
    "after_claim_commit",
    "after_rcpt",
    "before_t4_commit",
    "after_t4_commit",
    "after_data_write",
    "after_250_before_t5",
    "after_t5_commit",
)


class CrashPointError(ValueError):
    """A crash spec names an unknown point or an invalid probability."""


class CrashPoints:
    """``after_t4_commit:0.05,after_claim_commit:0.01[,seed=N]``: where to die, how often."""

    def __init__(self, probabilities: Mapping[str, float], *, seed: int | None = None) -> None:
        unknown = set(probabilities) - set(POINTS)
        if unknown:
            raise CrashPointError(
                f"unknown crash point(s) {sorted(unknown)}; known: {', '.join(POINTS)}"
            )
        self.probabilities = dict(probabilities)
        self._random = random.Random(seed)

    @classmethod
    def parse(cls, spec: str) -> CrashPoints:
        probabilities: dict[str, float] = {}
        seed: int | None = None
        for item in spec.split(","):
            name, _, value = item.strip().partition(":")
            if name.startswith("seed="):
                seed = int(name.removeprefix("seed="))
                continue
            try:
                probability = float(value) if value else 1.0
            except ValueError as exc:
                raise CrashPointError(f"invalid probability in crash spec: {item!r}") from exc
            if not 0.0 <= probability <= 1.0:
                raise CrashPointError(f"probability out of range in crash spec: {item!r}")
            probabilities[name] = probability
        return cls(probabilities, seed=seed)

    def hit(self, point: str) -> None:
        probability = self.probabilities.get(point, 0.0)
        if probability and self._random.random() < probability:
            crash(point)


def crash(point: str) -> None:
    """Die the way a power cut or OOM kill does: no cleanup, no flush beyond this line."""
    sys.stderr.write(f"HERALD_CRASH {point} pid={os.getpid()}\n")
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


class CrashInstrumentation(NullInstrumentation):
    """Each named point of a send rolls the dice of ``CrashPoints``."""

    def __init__(self, points: CrashPoints) -> None:
        self.points = points

    async def after_claim_commit(self, jobs: Sequence[ClaimedJob]) -> None:
        self.points.hit("after_claim_commit")

    async def after_rcpt(self, job: ClaimedJob) -> None:
        self.points.hit("after_rcpt")

    def before_t4_commit(self, leases: Sequence[Lease]) -> None:
        self.points.hit("before_t4_commit")

    async def after_t4_commit(self, job: ClaimedJob) -> None:
        self.points.hit("after_t4_commit")

    def after_data_write(self, envelope: Envelope) -> None:
        self.points.hit("after_data_write")

    async def after_250_before_t5(self, job: ClaimedJob) -> None:
        self.points.hit("after_250_before_t5")

    async def after_t5_commit(self, job: ClaimedJob) -> None:
        self.points.hit("after_t5_commit")


class StopAfterClaim(NullInstrumentation):
    """The naive variant's pause: once this worker has recorded ``after_sends`` outcomes, it
    SIGSTOPs itself right after its next claim commits, so it holds claims it has not started
    (not in the backlog yet, not on the wire), and the controller resumes it once the others
    have recovered and sent them: the duplicates the meta-test must see.

    Only the first worker to get there stops: it creates ``marker`` (exclusively) and writes
    the ids of the claim's jobs in it, and every other worker finds it there. The controller
    reads the ids from it, not from the database when it notices the stop: on a loaded machine
    that can be after the others took some of them back, and the zombie, resumed before they
    were sent, then sent them first (one run's four held claims made one duplicate).

    A pause chosen from outside, at the server's gate, raced the worker: the longer the
    controller took to act, the more of the held claims had started (or timed out in DATA)
    first, and one CI run's zombie held none.
    """

    def __init__(self, after_sends: int, marker: Path) -> None:
        self.after_sends = after_sends
        self.marker = marker
        self.recorded = 0
        self.tried = False  # once per process, whoever creates the marker
        # The worker's ``GroupCommitter.quiet``, bound once the worker is built (``bind``).
        self.quiet: Callable[[], bool] = lambda: True

    def bind(self, quiet: Callable[[], bool]) -> None:
        self.quiet = quiet

    async def after_t5_commit(self, job: ClaimedJob) -> None:
        self.recorded += 1

    async def after_claim_commit(self, jobs: Sequence[ClaimedJob]) -> None:
        if self.tried or self.recorded < self.after_sends:
            return
        self.tried = True
        try:
            with self.marker.open("x") as marker:
                marker.write(" ".join(str(job.id) for job in jobs))
        except FileExistsError:
            return  # another worker is (or was) the zombie
        # Freeze with no transaction open: the others' recovery skips rows a frozen transaction
        # holds, so it would leave these very claims to the zombie, and the controller would
        # resume the zombie before they were sent (its ``blocked_grace``), which then sent them
        # first.
        # Polled: quiet is a state of the database threads, with no event of the loop's own.
        while not self.quiet():  # noqa: ASYNC110
            await asyncio.sleep(0.001)
        sys.stderr.write(f"HERALD_STOP after_claim_commit pid={os.getpid()} jobs={len(jobs)}\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGSTOP)


class UnguardedStore(OutboxStore):
    """T4 with its guards switched off, and unjournalled: a zombie's T4 always succeeds. Its
    heartbeat is naive too: every lease it holds is reported alive, so a resumed zombie never
    learns that its claims were taken back and sends them (the meta-test's duplicates do not
    depend on whether the heartbeat or a send runs first after SIGCONT)."""

    def heartbeat(
        self, conn: sa.Connection, leases: Sequence[Lease], *, lease_seconds: float
    ) -> set[int]:
        super().heartbeat(conn, leases, lease_seconds=lease_seconds)
        return {job_id for job_id, _ in leases}

    def start_sends(
        self, conn: sa.Connection, leases: Sequence[Lease], *, margin_seconds: float, actor: str
    ) -> dict[int, datetime]:
        if not leases:
            return {}
        stmt = (
            sa.update(send_job)
            .where(send_job.c.id.in_([job_id for job_id, _ in leases]))
            .values(
                state="sending",
                send_attempts=send_job.c.send_attempts + 1,
                send_started_at=db_now(),
            )
            .returning(send_job.c.id, send_job.c.send_started_at)
        )
        return {row.id: row.send_started_at for row in conn.execute(stmt)}


def trust_every_lease(leases: HeldLeases) -> None:
    """Switch off the zombie's own lease clock too: every lease it holds counts as alive, so
    it tries T4 for its taken-back claims whenever a send starts after SIGCONT.

    The worker checks locally that a lease outlasts T4's margin before it tries T4, and a
    stopped worker's local deadlines have passed when it resumes. With only the store's guards
    off, whether the zombie sent anything depended on which ran first after SIGCONT: a send
    started the moment a DATA reply freed its slot (refused locally: no duplicate), or the
    heartbeat (naive: it renews every deadline). The meta-test needs the duplicate every time.
    """

    def deadline(lease: Lease) -> float:
        return math.inf if leases.holds(lease) else 0.0

    leases.deadline = deadline  # type: ignore[method-assign]
