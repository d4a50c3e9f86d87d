"""What a dispatch worker may be tuned with, and the owner name it leases jobs under."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from dispatch.backoff import BASE_DELAY
from dispatch.outbox.jobs import HeldLeases
from dispatch.rates import DEFAULT_DOMAIN_RATES, parse_rate

# Recovery's test is strict (expired, or more than the grace ago): a pass timed to the instant
# would find nothing by a hair and wait a floor more.
RECOVERY_MARGIN_SECONDS = 0.05
RECOVERY_FLOOR_SECONDS = 0.2


def default_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class WorkerConfig:
    concurrency: int = 20
    lease_seconds: float = 120.0
    # T4 needs this much lease left, so a send never starts on a lease about to lapse.
    t4_margin_seconds: float = 10.0
    poll_interval: float = 1.0  # seconds between claims when the queue is empty
    # The longest wait between recovery passes; a pass is due sooner when a lease it saw held
    # expires sooner (next_recovery_in).
    recovery_interval: float = 5.0
    # Recovery makes a started send in_doubt only this long after its lease expired on the
    # database clock: room for a live but slow holder (its outcome or heartbeat waiting in its
    # committer's batch or on a row lock; PostgreSQL's now() is its transaction's start).
    # Unstarted claims owe no grace: their holder can no longer start them. docs/design.md §5.
    recovery_grace_seconds: float = 2.0
    shutdown_grace_seconds: float = 30.0
    retry_base_seconds: float = BASE_DELAY
    until_idle: bool = False
    idle_horizon_seconds: float = 60.0  # --until-idle waits for jobs due within this
    owner: str = field(default_factory=default_owner)
    # Sends per second by recipient domain, shared by all workers (dispatch.rate_gate).
    domain_rates: Mapping[str, float] = field(
        default_factory=lambda: {
            d: parse_rate(r).per_second for d, r in DEFAULT_DOMAIN_RATES.items()
        }
    )

    @property
    def heartbeat_interval(self) -> float:
        return self.lease_seconds / 3

    def next_recovery_in(self, held: HeldLeases) -> float:
        """Seconds until the next recovery pass, given the leases the last pass left held
        (their time to expiry on the database clock).

        An unstarted claim becomes recoverable at its expiry, a started send the grace after
        it (recovery's rules, docs/design.md §5), so the pass is due at the first of those
        moments, never later than ``recovery_interval`` and never sooner than
        RECOVERY_FLOOR_SECONDS (a lease already recoverable, or a clock oddity, must not make
        the loop spin).
        """
        due = [
            expiry + grace
            for expiry, grace in (
                (held.claimed_in, 0.0),
                (held.sending_in, self.recovery_grace_seconds),
            )
            if expiry is not None
        ]
        if not due:
            return self.recovery_interval
        return min(
            self.recovery_interval, max(RECOVERY_FLOOR_SECONDS, min(due) + RECOVERY_MARGIN_SECONDS)
        )
