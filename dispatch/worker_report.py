"""What one worker run did: the counts ``herald worker`` prints when it stops."""

from __future__ import annotations

from dataclasses import dataclass

from dispatch.states import State


@dataclass
class WorkerReport:
    claimed: int = 0
    sent: int = 0
    retried: int = 0
    failed: int = 0
    in_doubt: int = 0
    released: int = 0
    outside_window: int = 0  # claims handed back until their send window opens (W2)
    rate_limited: int = 0  # claims handed back until a slot of their rate limit (W3)
    relay_unavailable: int = 0  # claims handed back because the relay was unreachable (W4)
    lost_leases: int = 0
    recovered: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)

    def count_completion(self, target: State) -> None:
        """Count a completion the outbox applied, by the state it moved the job to."""
        if target is State.SENT:
            self.sent += 1
        elif target is State.PENDING:
            self.retried += 1
        elif target is State.FAILED:
            self.failed += 1
        elif target is State.IN_DOUBT:
            self.in_doubt += 1
