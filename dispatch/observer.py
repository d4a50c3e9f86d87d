"""What a worker tells whoever counts its work (Prometheus metrics, in herald.metrics).

``Instrumentation`` (dispatch.instrumentation) names the moments of one send so a test can
pause or kill it there; ``WorkerObserver`` is told totals as they happen: each claim batch's
size, each recorded outcome, how long each transport call took, each recovery pass, each
change of a relay's circuit. dispatch knows nothing of Prometheus: herald implements this
protocol, the worker defaults to ``NULL_OBSERVER``.

Every method is a plain call on the worker's event loop and must return at once (no I/O): a
counter incremented, nothing more.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from dispatch.outbox.jobs import RecoveryReport


class WorkerObserver(Protocol):
    def on_claim_batch(self, size: int) -> None:
        """A claim committed and returned ``size`` (> 0) jobs."""

    def on_outcome(self, outcome: str) -> None:
        """A send's outcome was recorded: ``sent``, ``failed``, ``retry`` or ``in_doubt``."""

    def on_transport_call(self, channel: str, seconds: float) -> None:
        """A delivery on ``channel`` (``email``, ``webhook``) after T4 took this long (SMTP:
        DATA and the receiver's answer)."""

    def on_recovery(self, report: RecoveryReport) -> None:
        """A recovery pass of this worker ended (the report may count nothing)."""

    def on_relay_state(self, relay: str, up: bool) -> None:
        """This worker found ``relay`` (redacted) reachable or not."""


class NullObserver:
    """Counts nothing: the default."""

    def on_claim_batch(self, size: int) -> None:
        return None

    def on_outcome(self, outcome: str) -> None:
        return None

    def on_transport_call(self, channel: str, seconds: float) -> None:
        return None

    def on_recovery(self, report: RecoveryReport) -> None:
        return None

    def on_relay_state(self, relay: str, up: bool) -> None:
        return None


NULL_OBSERVER: WorkerObserver = NullObserver()

# Outcome names by the state a completion moved the job to (dispatch.worker_report does the same
# for the printed counts).
OUTCOME_BY_TARGET = {"sent": "sent", "pending": "retry", "failed": "failed", "in_doubt": "in_doubt"}
