"""What a dispatch worker may be tuned with, and the owner name it leases jobs under."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from dispatch.backoff import BASE_DELAY
from dispatch.rates import DEFAULT_DOMAIN_RATES, parse_rate


def default_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class WorkerConfig:
    concurrency: int = 20
    lease_seconds: float = 120.0
    # T4 needs this much lease left, so a send never starts on a lease about to lapse.
    t4_margin_seconds: float = 10.0
    poll_interval: float = 1.0  # seconds between claims when the queue is empty
    recovery_interval: float = 5.0
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
