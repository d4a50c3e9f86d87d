"""Named moments of a send, for whoever wants to watch them (the chaos suite, tests, metrics).

A send passes the same points in every worker: its claim commits, RCPT is accepted, T4 is about
to commit (and then has), the message's last byte is written, the receiver says 250, T5
commits. ``Instrumentation`` names those points; the worker, the group committer and the
transports each take one through their constructor and call it there. The product passes
nothing and gets ``NullInstrumentation``, whose every method does nothing: no point can change
what the product does unless a caller builds the worker with a different one (only tests do,
e.g. ``tests/chaos/instruments.py``, which SIGKILLs the process at a chosen point).

Where the call happens decides its colour: the worker's events are awaited on its event loop
(a test may pause a send there); ``before_t4_commit`` runs on the database thread inside the
open transaction, and ``after_data_write`` inside the socket write, so both are plain calls that
must return at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # the transports import this module; keep them free of the store's imports
    from dispatch.store import ClaimedJob, Lease
    from dispatch.transport import Envelope


class Instrumentation(Protocol):
    async def after_claim_commit(self, jobs: Sequence[ClaimedJob]) -> None:
        """A claim committed and returned these (never empty) jobs."""

    async def after_rcpt(self, job: ClaimedJob) -> None:
        """The transport is prepared (SMTP: RCPT accepted); nothing of the message went out."""

    async def before_t4(self, job: ClaimedJob) -> None:
        """The worker is about to ask for T4 (claimed → sending) for this job."""

    def before_t4_commit(self, leases: Sequence[Lease]) -> None:
        """Database thread: T4 updated these leases' rows; the transaction is still open."""

    async def after_t4_commit(self, job: ClaimedJob) -> None:
        """T4 is durable: the point of no return is next."""

    def after_data_write(self, envelope: Envelope) -> None:
        """The whole message is handed to the socket; the receiver's answer is not read yet."""

    async def after_250_before_t5(self, job: ClaimedJob) -> None:
        """The receiver accepted the message; T5 (→ sent) is not recorded yet."""

    async def after_t5_commit(self, job: ClaimedJob) -> None:
        """The job's outcome is recorded (whatever it was)."""


class NullInstrumentation:
    """Watches nothing. The default everywhere; subclass it to watch only some points."""

    async def after_claim_commit(self, jobs: Sequence[ClaimedJob]) -> None:
        return None

    async def after_rcpt(self, job: ClaimedJob) -> None:
        return None

    async def before_t4(self, job: ClaimedJob) -> None:
        return None

    def before_t4_commit(self, leases: Sequence[Lease]) -> None:
        return None

    async def after_t4_commit(self, job: ClaimedJob) -> None:
        return None

    def after_data_write(self, envelope: Envelope) -> None:
        return None

    async def after_250_before_t5(self, job: ClaimedJob) -> None:
        return None

    async def after_t5_commit(self, job: ClaimedJob) -> None:
        return None


NULL_INSTRUMENTATION: Instrumentation = NullInstrumentation()
