"""Why a job ended in doubt, decided from evidence only: the journal and the server's record.

The chaos suite must tell a legitimate ``in_doubt`` (the sender cannot know whether the server
took the message) from a defect (a job in doubt that never passed T4, a reason the journal does
not back, a disconnect the server never caused). Nothing here looks at a clock or at how busy
the machine was: a worker that was slow because the machine was loaded leaves exactly the same
evidence as one that was slow for any other reason, and the verdict must not change with load.

Evidence, per job:

- the journal (``send_event``): the ``claimed -> sending`` event (T4) under the token the job
  ended with, who committed it (the holder), and the ``sending -> in_doubt`` event with its
  detail, which must be the job's ``in_doubt_reason``;
- the server: the faults it injected into that message's DATA (drop before/after storing,
  delayed reply), and its fsync'd ledger of accepted Message-IDs;
- the workers: which processes the harness killed or stopped, and which reported (in their
  final ``--json`` report) that they lost a lease.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tests.support.smtp_server import Fault

DATA_FAULTS = frozenset({Fault.DROP_AFTER_STORE, Fault.DROP_BEFORE_STORE, Fault.DELAY_REPLY})
RECOVERY_REASON = "lease expired during send"  # dispatch/store.py, recovery R2
CLIENT_DATA_PREFIX = "inside DATA: "  # dispatch/smtp.py, a DATA reply that never came
# The exception names aiosmtplib and asyncio give a reply that did not arrive in time.
TIMEOUTS = frozenset({"SMTPReadTimeoutError", "SMTPTimeoutError", "TimeoutError"})


@dataclass(frozen=True)
class JournalEvent:
    token: int
    from_state: str | None
    to_state: str
    actor: str
    detail: str | None


def pid_of(owner: str) -> int:
    """The process id in a worker owner string (``host:pid:nonce``), or -1."""
    parts = owner.split(":")
    return int(parts[1]) if len(parts) >= 2 and parts[1].isdigit() else -1


def explain_in_doubt(
    *,
    reason: str | None,
    token: int,
    events: Sequence[JournalEvent],
    data_faults: Iterable[Fault],
    troubled_pids: set[int],
    lease_losers: set[int],
) -> str | None:
    """The cause of one ``in_doubt`` job, or ``None`` when the evidence does not account for it.

    ``events`` are the job's journal rows in order; ``data_faults`` what the server did to its
    Message-ID at DATA; ``troubled_pids`` the workers the harness killed or stopped;
    ``lease_losers`` the workers that exited on their own reporting a lost lease.
    """
    mine = [event for event in events if event.token == token]
    started = [e for e in mine if e.from_state == "claimed" and e.to_state == "sending"]
    doubted = [e for e in mine if e.from_state == "sending" and e.to_state == "in_doubt"]
    if not started or not doubted:
        return None  # in doubt without passing T4 under this lease: a real defect
    holder, verdict = started[-1].actor, doubted[-1]
    if verdict.detail != reason:
        return None  # the job and its journal disagree about why
    if any(fault in DATA_FAULTS for fault in data_faults):
        return "server_fault_in_data"
    if reason == RECOVERY_REASON:
        # Recovery decides only for leases expired on the database clock. The holder was
        # killed or stopped by us, or - starved of CPU, say - it says itself that it lost the
        # lease: its completion for this job matched nothing, which only a recovered row causes.
        if pid_of(holder) in troubled_pids:
            return "worker_killed_or_paused_in_data"
        if pid_of(holder) in lease_losers:
            return "lease_expired_in_data"
        return None
    if verdict.actor == holder and reason is not None and reason.startswith(CLIENT_DATA_PREFIX):
        error = reason.removeprefix(CLIENT_DATA_PREFIX).split(":", 1)[0]
        if error in TIMEOUTS:
            # The holder itself waited for the DATA reply past its data_timeout. Whether the
            # server was slow (its ledger may hold the message) or never got that far, the
            # sender cannot know: exactly what in_doubt is for.
            return "client_timeout_in_data"
    # A disconnect the server did not cause, a cancellation nobody asked for, ...: unexplained.
    return None
