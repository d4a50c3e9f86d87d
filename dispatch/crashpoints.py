"""Named crash points: a test facility for the chaos suite (never set in production).

``HERALD_CRASH_AT=after_t4_commit:0.05,after_claim_commit:0.01`` makes a worker SIGKILL itself
at those points with those probabilities. Off unless the variable is set. The seed, when given
as ``seed=N``, makes a run repeatable.
"""

from __future__ import annotations

import os
import random
import signal
import sys
from collections.abc import Mapping

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
    """HERALD_CRASH_AT names an unknown point or an invalid probability."""


class CrashPoints:
    def __init__(self, probabilities: Mapping[str, float], *, seed: int | None = None) -> None:
        unknown = set(probabilities) - set(POINTS)
        if unknown:
            raise CrashPointError(
                f"unknown crash point(s) {sorted(unknown)}; known: {', '.join(POINTS)}"
            )
        self.probabilities = dict(probabilities)
        self._random = random.Random(seed)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> CrashPoints | None:
        spec = (os.environ if environ is None else environ).get("HERALD_CRASH_AT", "").strip()
        if not spec:
            return None
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
                raise CrashPointError(f"invalid probability in HERALD_CRASH_AT: {item!r}") from exc
            if not 0.0 <= probability <= 1.0:
                raise CrashPointError(f"probability out of range in HERALD_CRASH_AT: {item!r}")
            probabilities[name] = probability
        return cls(probabilities, seed=seed)

    def armed(self, point: str) -> bool:
        return self.probabilities.get(point, 0.0) > 0.0

    def hit(self, point: str) -> None:
        probability = self.probabilities.get(point, 0.0)
        if probability and self._random.random() < probability:
            crash(point)


def crash(point: str) -> None:
    """Die the way a power cut or OOM kill does: no cleanup, no flush beyond this line."""
    sys.stderr.write(f"HERALD_CRASH {point} pid={os.getpid()}\n")
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)
