"""What a chaos run is configured with and what it reports, and the server's fault plan."""

from __future__ import annotations

import random
import subprocess
import sys
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.smtp_server import Fault

HERALD = str(Path(sys.executable).parent / "herald")
TERMINAL = {"sent", "failed", "cancelled", "in_doubt"}


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
    in_doubt_stored: int = 0  # in-doubt messages the server's ledger holds (resolve as sent)
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
            f"in_doubt={self.states['in_doubt']} ({causes}; stored={self.in_doubt_stored}) "
            f"sent={self.states['sent']} failed={self.states['failed']} "
            f"unexplained={len(self.unexplained_in_doubt)} problems={len(self.problems)} "
            f"in {self.seconds:.1f}s"
        )


GATE_LIMIT_SECONDS = 120.0


class FaultLog:
    """A seeded server fault plan that remembers what it did to each Message-ID."""

    def __init__(self, seed: int, enabled: bool, *, gate_after: int | None = None) -> None:
        self.seed = seed
        self.enabled = enabled
        self.faults: dict[str, list[Fault]] = {}
        self._lock = threading.Lock()
        # The gate: when the server has taken ``gate_after`` messages it holds every DATA reply
        # (it blocks its own event loop) until the controller opens it. Every worker is then
        # waiting inside DATA, holding jobs, so the controller's SIGSTOP always makes a zombie,
        # however slowly the controller itself gets scheduled: an event, not a race.
        self.gate_after = gate_after
        self.gate_reached = threading.Event()
        self.gate_open = threading.Event()
        self._data_seen = 0

    def __call__(self, key: str, n: int) -> Fault:
        if not key.startswith("<"):
            return Fault.ACCEPT  # the RCPT call: only DATA (keyed by Message-ID) is planned
        self._hold_at_gate()
        if not self.enabled:
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

    def _hold_at_gate(self) -> None:
        if self.gate_after is None:
            return
        with self._lock:
            self._data_seen += 1
            reached = self._data_seen >= self.gate_after
        if reached and not self.gate_open.is_set():
            self.gate_reached.set()
            # Bounded, so a controller that died cannot hang the server for ever.
            self.gate_open.wait(GATE_LIMIT_SECONDS)


@dataclass
class WorkerProcess:
    process: subprocess.Popen[bytes]
    stderr_path: Path
    stdout_path: Path
    owner_pid: int
    fate: str | None = None  # why it died, when we killed it
